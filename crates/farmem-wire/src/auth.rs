//! Challenge-response authentication with a shared token.
//!
//! Both sides send a fresh nonce; each proves knowledge of the token with an
//! HMAC-SHA256 over both nonces, the client's name and its own direction label,
//! so the token never crosses the wire and a proof cannot be replayed or
//! reflected back.
//!
//! Roles are proven, not claimed: the proof for a claimed role is keyed with
//! that role's key, derived from the cluster secret ([`role_key`]). Daemons
//! hold the secret; a compute node may be given only its role's key (a token
//! file holding `farmem-role-key compute HEX`, see [`client_key`]), with
//! which it cannot pass as a controller or a memory node. The controller
//! signs capabilities ([`cap_mac`]) under another key derived from the
//! secret; memory nodes check them before serving a client's range.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::msg::{Cap, Role};

type HmacSha256 = Hmac<Sha256>;

/// Length of an HMAC-SHA256 proof.
pub const PROOF_LEN: usize = 32;

fn proof(
    token: &[u8],
    label: &[u8],
    first: &[u8; 16],
    second: &[u8; 16],
    name: &str,
) -> [u8; PROOF_LEN] {
    let mut mac = HmacSha256::new_from_slice(token).expect("HMAC accepts keys of any length");
    mac.update(label);
    mac.update(first);
    mac.update(second);
    mac.update(name.as_bytes());
    mac.finalize().into_bytes().into()
}

/// The server's proof, sent in `Challenge`.
pub fn server_proof(
    token: &[u8],
    client_nonce: &[u8; 16],
    server_nonce: &[u8; 16],
    name: &str,
) -> [u8; PROOF_LEN] {
    proof(token, b"farmem/server/v1", client_nonce, server_nonce, name)
}

/// The client's proof, sent in `Auth`.
pub fn client_proof(
    token: &[u8],
    client_nonce: &[u8; 16],
    server_nonce: &[u8; 16],
    name: &str,
) -> [u8; PROOF_LEN] {
    proof(token, b"farmem/client/v1", server_nonce, client_nonce, name)
}

/// The first word of a token file that holds one role's key, not the secret.
pub const ROLE_KEY_PREFIX: &str = "farmem-role-key";

/// Why a token cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the token is a key for role {have}, not for role {want}")]
    WrongRole {
        have: &'static str,
        want: &'static str,
    },
    #[error("malformed role key: expected `{ROLE_KEY_PREFIX} ROLE HEX` with 64 hex digits")]
    Malformed,
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; PROOF_LEN] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// A role's key: HMAC(secret, `"farmem/role/<role>"`).
pub fn role_key(secret: &[u8], role: Role) -> [u8; PROOF_LEN] {
    mac(secret, &[b"farmem/role/", role.name().as_bytes()])
}

/// A token file's text holding `role`'s key (what `farmem token` prints).
pub fn format_role_key(role: Role, key: &[u8; PROOF_LEN]) -> String {
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    format!("{ROLE_KEY_PREFIX} {} {hex}", role.name())
}

/// `Some` when `token` is a role key (`farmem-role-key ROLE HEX`), not a secret.
pub fn parse_role_key(token: &[u8]) -> Option<Result<(Role, [u8; PROOF_LEN]), AuthError>> {
    let text = std::str::from_utf8(token).ok()?;
    let rest = text.trim().strip_prefix(ROLE_KEY_PREFIX)?;
    let mut words = rest.split_whitespace();
    let parsed = (|| {
        let role = Role::from_name(words.next()?)?;
        let hex = words.next()?.as_bytes();
        if hex.len() != 2 * PROOF_LEN || words.next().is_some() {
            return None;
        }
        let mut key = [0u8; PROOF_LEN];
        for (k, pair) in key.iter_mut().zip(hex.chunks_exact(2)) {
            *k = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
        }
        Some((role, key))
    })();
    Some(parsed.ok_or(AuthError::Malformed))
}

/// The key a client claiming `role` proves itself with: derived from the
/// secret, or the role key the token holds (which must be `role`'s).
pub fn client_key(token: &[u8], role: Role) -> Result<[u8; PROOF_LEN], AuthError> {
    match parse_role_key(token) {
        None => Ok(role_key(token, role)),
        Some(Ok((have, key))) if have == role => Ok(key),
        Some(Ok((have, _))) => Err(AuthError::WrongRole {
            have: have.name(),
            want: role.name(),
        }),
        Some(Err(e)) => Err(e),
    }
}

/// The controller's MAC over a capability: `owner` may use `cap`'s range on
/// node `cap.node` while it runs as `incarnation`, under grant `cap.stamp`.
pub fn cap_mac(secret: &[u8], owner: &str, cap: &Cap, incarnation: u64) -> [u8; PROOF_LEN] {
    let key = mac(secret, &[b"farmem/cap"]);
    mac(
        &key,
        &[
            b"farmem/cap/v1",
            &cap.node.to_le_bytes(),
            &cap.base.to_le_bytes(),
            &cap.len.to_le_bytes(),
            &cap.stamp.to_le_bytes(),
            &incarnation.to_le_bytes(),
            owner.as_bytes(),
        ],
    )
}

/// Compares proofs in constant time.
pub fn verify(expected: &[u8; PROOF_LEN], got: &[u8; PROOF_LEN]) -> bool {
    expected
        .iter()
        .zip(got)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_depend_on_token_direction_and_nonces() {
        let (c, s) = ([1u8; 16], [2u8; 16]);
        let good = client_proof(b"secret", &c, &s, "cn");
        assert!(verify(&good, &client_proof(b"secret", &c, &s, "cn")));
        assert!(!verify(&good, &client_proof(b"other", &c, &s, "cn")));
        assert!(!verify(&good, &client_proof(b"secret", &s, &c, "cn")));
        assert!(!verify(&good, &server_proof(b"secret", &c, &s, "cn")));
        assert!(!verify(&good, &client_proof(b"secret", &c, &s, "cn2")));
    }

    #[test]
    fn role_keys_parse_back_and_are_bound_to_their_role() {
        let key = role_key(b"secret", Role::Compute);
        assert_ne!(key, role_key(b"secret", Role::Controller));
        let text = format_role_key(Role::Compute, &key);
        assert_eq!(client_key(text.as_bytes(), Role::Compute), Ok(key));
        assert_eq!(client_key(b"secret", Role::Compute), Ok(key));
        assert!(matches!(
            client_key(text.as_bytes(), Role::Controller),
            Err(AuthError::WrongRole { .. })
        ));
        assert_eq!(
            client_key(b"farmem-role-key compute 12", Role::Compute),
            Err(AuthError::Malformed)
        );
        assert_eq!(parse_role_key(b"\xff\xfe"), None);
    }

    #[test]
    fn cap_macs_cover_every_field() {
        let cap = Cap {
            node: 1,
            base: 2,
            len: 3,
            stamp: 4,
            mac: [0; 32],
        };
        let good = cap_mac(b"s", "a", &cap, 9);
        assert_ne!(good, cap_mac(b"s", "b", &cap, 9));
        assert_ne!(good, cap_mac(b"s", "a", &cap, 8));
        assert_ne!(
            good,
            cap_mac(
                b"s",
                "a",
                &Cap {
                    len: 4,
                    ..cap.clone()
                },
                9
            )
        );
        assert_ne!(
            good,
            cap_mac(
                b"s",
                "a",
                &Cap {
                    stamp: 5,
                    ..cap.clone()
                },
                9
            )
        );
        assert_ne!(good, cap_mac(b"t", "a", &cap, 9));
    }
}
