//! The controller's metrics for `--metrics`: its statistics as one
//! Prometheus scrape.

use farmem_net::metrics::Scrape;

use crate::Controller;

impl Controller {
    /// Its metrics for a Prometheus scrape (`farmem controller
    /// --metrics`): the rack's memory, each node and each client, and its
    /// server's.
    pub fn scrape(&self) -> Scrape {
        let st = self.stats();
        let mut s = Scrape::default();
        for (name, help, v) in [
            ("farmem_controller_nodes", "Memory nodes known", st.nodes),
            ("farmem_controller_nodes_up", "Memory nodes up", st.nodes_up),
            (
                "farmem_controller_capacity_bytes",
                "Memory the nodes offer",
                st.capacity_bytes,
            ),
            (
                "farmem_controller_granted_bytes",
                "Memory granted",
                st.granted_bytes,
            ),
            (
                "farmem_controller_free_bytes",
                "Memory free to grant",
                st.free_bytes,
            ),
            ("farmem_controller_grants", "Grants held", st.grants),
            (
                "farmem_controller_leases",
                "Clients holding grants on a lease",
                st.leases,
            ),
            (
                "farmem_controller_lost_bytes",
                "Granted bytes whose node restarted",
                st.lost_bytes,
            ),
            (
                "farmem_controller_standby",
                "1 while another controller leads",
                u64::from(st.standby),
            ),
        ] {
            s.gauge(name, help, &[], v as f64);
        }
        for (name, help, v) in [
            (
                "farmem_controller_grants_reclaimed",
                "Grants taken back at lease end",
                st.grants_reclaimed,
            ),
            (
                "farmem_controller_reclaimed_bytes",
                "Bytes taken back at lease end",
                st.bytes_reclaimed,
            ),
            (
                "farmem_controller_takeovers",
                "Times this controller took the lead",
                st.takeovers,
            ),
            (
                "farmem_controller_state_save_errors",
                "Failed saves of the state",
                st.state_save_errors,
            ),
        ] {
            s.counter(name, help, &[], v);
        }
        for (reason, v) in [
            ("role", st.refused_role),
            ("name", st.refused_name),
            ("capability", st.refused_capability),
            ("role_handshake", st.refused_role_handshake),
            ("quota", st.refused_quota),
        ] {
            s.counter(
                "farmem_controller_refused",
                "Requests refused, by reason",
                &[("reason", reason)],
                v,
            );
        }
        for n in &st.node_table {
            let id = n.id.to_string();
            let at = [("node", id.as_str()), ("addr", n.addr.as_str())];
            s.gauge(
                "farmem_controller_node_up",
                "1 while the node heartbeats",
                &at,
                f64::from(u8::from(n.up)),
            );
            s.gauge(
                "farmem_controller_node_capacity_bytes",
                "Memory the node offers",
                &at,
                n.capacity_bytes as f64,
            );
            s.gauge(
                "farmem_controller_node_granted_bytes",
                "Memory granted on the node",
                &at,
                n.granted_bytes as f64,
            );
        }
        for c in &st.clients {
            let at = [("client", c.name.as_str())];
            s.gauge(
                "farmem_controller_client_granted_bytes",
                "Memory a client holds",
                &at,
                c.granted_bytes as f64,
            );
            s.gauge(
                "farmem_controller_client_grants",
                "Grants a client holds",
                &at,
                c.grants as f64,
            );
        }
        s.server(self.server.stats());
        s
    }
}
