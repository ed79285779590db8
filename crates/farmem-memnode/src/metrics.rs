//! A memory node's metrics for `--metrics`: its statistics as one
//! Prometheus scrape.

use farmem_net::metrics::Scrape;

use crate::MemNode;

impl MemNode {
    /// Its metrics for a Prometheus scrape (`farmem memnode --metrics`):
    /// memory held, data moved, refusals by reason, and its server's.
    pub fn scrape(&self) -> Scrape {
        let st = self.stats();
        let mut s = Scrape::default();
        let node = st.node.to_string();
        let at = [("node", node.as_str())];
        for (name, help, v) in [
            (
                "farmem_memnode_capacity_bytes",
                "Memory offered",
                st.capacity,
            ),
            (
                "farmem_memnode_resident_bytes",
                "Memory backed now",
                st.resident_bytes,
            ),
            (
                "farmem_memnode_granted_bytes",
                "Memory granted to clients",
                st.granted_bytes,
            ),
            ("farmem_memnode_grants", "Granted ranges held", st.grants),
            (
                "farmem_memnode_lost_bytes",
                "Granted bytes lost in a restart",
                st.lost_bytes,
            ),
        ] {
            s.gauge(name, help, &at, v as f64);
        }
        for (name, help, v) in [
            ("farmem_memnode_reads", "Read requests served", st.reads),
            ("farmem_memnode_writes", "Write requests served", st.writes),
            ("farmem_memnode_read_bytes", "Bytes read", st.bytes_read),
            (
                "farmem_memnode_written_bytes",
                "Bytes written",
                st.bytes_written,
            ),
            (
                "farmem_memnode_log_batches",
                "Cache-line log batches applied",
                st.log_batches,
            ),
            (
                "farmem_memnode_log_lines",
                "Cache lines applied from logs",
                st.log_lines,
            ),
        ] {
            s.counter(name, help, &at, v);
        }
        for (reason, v) in [
            ("not_owner", st.refused_not_owner),
            ("out_of_range", st.refused_out_of_range),
            ("role", st.refused_role),
            ("lost", st.refused_lost),
            ("too_long", st.refused_too_long),
            ("capability", st.refused_capability),
            ("role_handshake", st.refused_role_handshake),
        ] {
            let labels = [("node", node.as_str()), ("reason", reason)];
            s.counter(
                "farmem_memnode_refused",
                "Requests refused, by reason",
                &labels,
                v,
            );
        }
        s.server(self.server.stats());
        s
    }
}
