//! Challenge-response authentication with a shared token.
//!
//! Both sides send a fresh nonce; each proves knowledge of the token with an
//! HMAC-SHA256 over both nonces, the client's name and its own direction label,
//! so the token never crosses the wire and a proof cannot be replayed or
//! reflected back. Every node of a cluster shares one token: the handshake
//! keeps outsiders out; which extents a member may touch is the ownership
//! check's business.

use hmac::{Hmac, Mac};
use sha2::Sha256;

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
}
