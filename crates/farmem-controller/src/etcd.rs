//! A small blocking client of etcd's v3 API through its JSON gateway
//! (`/v3/kv/range`, `/v3/kv/txn`, `/v3/lease/grant`, `/v3/lease/keepalive`,
//! `/v3/lease/revoke`): just what the state store and the leader election
//! need. Keys and values travel base64-encoded, 64-bit numbers as strings.
//!
//! Why the gateway rather than the gRPC client crate: the gRPC stack needs
//! an async runtime (and protobuf code generation) inside a controller that
//! is otherwise plain threads, for a handful of one-shot requests.

use std::str::FromStr;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

/// How long one request to etcd may take.
pub(crate) const ETCD_TIMEOUT: Duration = Duration::from_millis(1500);

/// `etcd://HOST:PORT/PREFIX`: where the controller keeps its state and
/// holds its election. The prefix defaults to `farmem`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUrl {
    /// `HOST:PORT` of etcd's client URL (plain HTTP).
    pub endpoint: String,
    /// Every key the controller uses starts with `PREFIX/`.
    pub prefix: String,
}

impl FromStr for EtcdUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let rest = s
            .strip_prefix("etcd://")
            .ok_or_else(|| format!("`{s}` is not an etcd://HOST:PORT/PREFIX address"))?;
        let (endpoint, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let port_ok = endpoint
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(format!("`{s}`: etcd's address must be HOST:PORT"));
        }
        let prefix = prefix.trim_matches('/');
        Ok(Self {
            endpoint: endpoint.to_string(),
            prefix: if prefix.is_empty() { "farmem" } else { prefix }.to_string(),
        })
    }
}

impl std::fmt::Display for EtcdUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd://{}/{}", self.endpoint, self.prefix)
    }
}

/// Why a request to etcd failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("cannot reach etcd at {endpoint} ({what}): {error}")]
    Unreachable {
        endpoint: String,
        what: &'static str,
        error: String,
    },
    #[error("etcd at {endpoint} refused {what}: HTTP {status}: {body}")]
    Refused {
        endpoint: String,
        what: &'static str,
        status: u16,
        body: String,
    },
    #[error("etcd at {endpoint} answered {what} with something unexpected: {detail}")]
    Reply {
        endpoint: String,
        what: &'static str,
        detail: String,
    },
}

/// A key's value and the revision that created it (which names this
/// particular life of the key: deleted and made again, it has another).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub value: Vec<u8>,
    pub create_revision: i64,
    /// The revision that last wrote it.
    pub mod_revision: i64,
    /// The etcd lease it is bound to (0: none).
    pub lease: i64,
}

/// A client of one etcd endpoint, for keys under one prefix.
pub struct Etcd {
    agent: ureq::Agent,
    endpoint: String,
    prefix: String,
}

/// A 64-bit number as the gateway writes it: a string, or absent for 0.
fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

impl Etcd {
    /// A client of `url` whose requests give up after `timeout`.
    pub fn new(url: &EtcdUrl, timeout: Duration) -> Self {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build();
        Self {
            agent: ureq::Agent::new_with_config(config),
            endpoint: url.endpoint.clone(),
            prefix: url.prefix.clone(),
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The full key of `name` under our prefix.
    pub fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }

    fn call(&self, what: &'static str, path: &str, body: &Value) -> Result<Value, EtcdError> {
        let url = format!("http://{}{path}", self.endpoint);
        let unreachable = |error: ureq::Error| EtcdError::Unreachable {
            endpoint: self.endpoint.clone(),
            what,
            error: error.to_string(),
        };
        let mut resp = self.agent.post(&url).send_json(body).map_err(unreachable)?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().map_err(unreachable)?;
        if status != 200 {
            return Err(EtcdError::Refused {
                endpoint: self.endpoint.clone(),
                what,
                status,
                body: text.chars().take(300).collect(),
            });
        }
        serde_json::from_str(&text).map_err(|e| self.bad(what, e.to_string()))
    }

    fn bad(&self, what: &'static str, detail: String) -> EtcdError {
        EtcdError::Reply {
            endpoint: self.endpoint.clone(),
            what,
            detail,
        }
    }

    fn kv(&self, what: &'static str, v: &Value) -> Result<Kv, EtcdError> {
        let value = v.get("value").and_then(Value::as_str).unwrap_or("");
        Ok(Kv {
            value: B64
                .decode(value)
                .map_err(|e| self.bad(what, format!("value not base64: {e}")))?,
            create_revision: int(&v["create_revision"]),
            mod_revision: int(&v["mod_revision"]),
            lease: int(&v["lease"]),
        })
    }

    /// The value of `key`, if it exists.
    pub fn get(&self, key: &str) -> Result<Option<Kv>, EtcdError> {
        let reply = self.call(
            "a read",
            "/v3/kv/range",
            &json!({ "key": b64(key.as_bytes()) }),
        )?;
        match reply
            .get("kvs")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            Some(kv) => self.kv("a read", kv).map(Some),
            None => Ok(None),
        }
    }

    /// A new lease of `ttl` seconds; its id.
    pub fn grant(&self, ttl: u64) -> Result<i64, EtcdError> {
        let reply = self.call(
            "a lease",
            "/v3/lease/grant",
            &json!({ "TTL": ttl.to_string() }),
        )?;
        match int(&reply["ID"]) {
            0 => Err(self.bad("a lease", format!("no lease id in {reply}"))),
            id => Ok(id),
        }
    }

    /// Renews `lease` once; the seconds it has left, 0 when it is gone.
    pub fn keep_alive(&self, lease: i64) -> Result<i64, EtcdError> {
        // A stream of one request: the gateway answers `{"result": ...}`.
        let reply = self.call(
            "a lease renewal",
            "/v3/lease/keepalive",
            &json!({ "ID": lease.to_string() }),
        )?;
        Ok(int(&reply["result"]["TTL"]))
    }

    /// Ends `lease` now, deleting the keys bound to it.
    pub fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        self.call(
            "revoking a lease",
            "/v3/lease/revoke",
            &json!({ "ID": lease.to_string() }),
        )
        .map(drop)
    }

    /// Creates `key` bound to `lease` if it does not exist: `Ok(revision)`
    /// that created it, or `Err` with whoever holds it now.
    pub fn create(
        &self,
        key: &str,
        value: &[u8],
        lease: i64,
    ) -> Result<Result<i64, Option<Kv>>, EtcdError> {
        let key = b64(key.as_bytes());
        let txn = json!({
            "compare": [{ "target": "CREATE", "key": key, "create_revision": "0" }],
            "success": [{ "request_put": { "key": key, "value": b64(value), "lease": lease.to_string() } }],
            "failure": [{ "request_range": { "key": key } }],
        });
        let what = "creating the leader key";
        let reply = self.call(what, "/v3/kv/txn", &txn)?;
        if reply["succeeded"].as_bool() == Some(true) {
            // The put is the transaction's only write: the revision it
            // made is the key's create revision.
            return Ok(Ok(int(&reply["header"]["revision"])));
        }
        let holder = reply["responses"][0]["response_range"]["kvs"]
            .as_array()
            .and_then(|a| a.first())
            .map(|kv| self.kv(what, kv))
            .transpose()?;
        Ok(Err(holder))
    }

    /// Writes `value` to `key` only while `fence` still exists in the life
    /// created at revision `fence_rev`: false (nothing written) otherwise.
    pub fn put_fenced(
        &self,
        fence: &str,
        fence_rev: i64,
        key: &str,
        value: &[u8],
    ) -> Result<bool, EtcdError> {
        let txn = json!({
            "compare": [{
                "target": "CREATE",
                "key": b64(fence.as_bytes()),
                "result": "EQUAL",
                "create_revision": fence_rev.to_string(),
            }],
            "success": [{ "request_put": { "key": b64(key.as_bytes()), "value": b64(value) } }],
        });
        let reply = self.call("a fenced write", "/v3/kv/txn", &txn)?;
        Ok(reply["succeeded"].as_bool() == Some(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_a_default_prefix_and_bad_ones_are_refused() {
        let u: EtcdUrl = "etcd://127.0.0.1:2379/rack/a/".parse().unwrap();
        assert_eq!(u.endpoint, "127.0.0.1:2379");
        assert_eq!(u.prefix, "rack/a");
        assert_eq!(u.to_string(), "etcd://127.0.0.1:2379/rack/a");
        let u: EtcdUrl = "etcd://localhost:2379".parse().unwrap();
        assert_eq!(u.prefix, "farmem");
        for bad in [
            "http://x:1/p",
            "etcd://nohost/p",
            "etcd://:1/p",
            "etcd://h:port/p",
        ] {
            assert!(bad.parse::<EtcdUrl>().is_err(), "{bad}");
        }
    }

    #[test]
    fn numbers_read_as_the_gateway_writes_them() {
        assert_eq!(int(&json!("42")), 42);
        assert_eq!(int(&json!(7)), 7);
        assert_eq!(int(&Value::Null), 0);
        assert_eq!(int(&json!("x")), 0);
    }
}
