//! Kubernetes manifests for a fabric (`weft k8s render`): the
//! objects that run a fabric's emu-nodes as pods of a cluster, built from
//! the typed objects of the k8s-openapi crate and written as JSON (which
//! `kubectl apply -f DIR` takes as it takes YAML).
//!
//! What runs (docs/KUBERNETES.md):
//! - a Namespace for the fabric;
//! - a Secret with the fabric's identity (certificate, private key) and
//!   token, made here;
//! - a ConfigMap with the plan: the topology file and the placement of its
//!   nodes on the emu-nodes;
//! - the orchestrator pod: `weft up --external-nodes N` with the plan and
//!   the Secret mounted; it starts no process and waits for the emu-nodes;
//! - a Service `weft-control` (UDP, QUIC) in front of it;
//! - one pod per emu-node: `emu-node --control weft-control...:7400 --pin
//!   PIN --process p --bind $(POD_IP) --token-file ...`, privileged (its
//!   TAP hosts need network namespaces and /dev/net/tun), its links bound
//!   on the pod's IP;
//! - a headless Service `weft-metrics` selecting the emu-node pods, whose
//!   `/metrics` listen on 9100 + p over HTTPS with the fabric's
//!   certificate, answering only bearers of the fabric token (`weft up
//!   --metrics-tls`); each pod has the DNS name
//!   `weft-emu-node-p.weft-metrics.<namespace>.svc.cluster.local`;
//! - a Prometheus pod `weft-prometheus` (Prometheus's own image) scraping every emu-node pod by that name, with the fabric's
//!   certificate and token from a Secret of their own (`weft-metrics-scrape`,
//!   without the private key) and its `prometheus.yml` from a ConfigMap,
//!   behind a Service `weft-prometheus` (port 9090) for Grafana.
//!
//! Invariants: the pin in every emu-node pod's command is the certificate
//! in the Secret; the placement in the ConfigMap is the one the
//! orchestrator applies; nothing here talks to a cluster.

use crate::config::topology::Topology;

/// Manifests that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// The fabric certificate could not be made.
    #[error(transparent)]
    Tls(#[from] emu_node::tls::TlsError),
    /// A manifest did not serialise.
    #[error("a manifest did not serialise: {0}")]
    Json(#[from] serde_json::Error),
}
use emu_node::tls::FabricIdentity;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, Namespace, ObjectFieldSelector, Pod, PodSpec,
    SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use std::collections::BTreeMap;

/// Port of the orchestrator's control endpoint in the cluster.
pub const CONTROL_PORT: u16 = 7400;
/// `/metrics` of emu-node p listens on this port + p.
pub const METRICS_PORT: u16 = 9100;
/// The Prometheus pod's port.
pub const PROMETHEUS_PORT: u16 = 9090;
/// The Prometheus pod's image unless told: Prometheus's own (its binary is
/// `/bin/prometheus`, on the PATH).
pub const PROMETHEUS_IMAGE: &str = "quay.io/prometheus/prometheus:v2.53.1";

/// What to render.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// Namespace (default `weft-<topology>`).
    pub namespace: String,
    /// Container image holding `weft` and `emu-node` on its PATH.
    pub image: String,
    /// Container image of the Prometheus pod.
    pub prometheus_image: String,
    /// emu-node pods.
    pub nodes: u32,
    /// `--links` between them (quic or udp).
    pub links: String,
}

/// The manifests: (file name, object as JSON), in the order to apply them.
pub type Manifests = Vec<(String, serde_json::Value)>;

fn meta(name: &str, ns: Option<&str>, labels: &[(&str, String)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: ns.map(str::to_string),
        labels: (!labels.is_empty()).then(|| labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()),
        ..Default::default()
    }
}

/// The `[placement]` table for `topo` placed on `nodes` emu-nodes (what
/// `weft up --placement` reads; keys sort in process order).
pub fn placement_toml(topo: &Topology, nodes: u32) -> String {
    let mut f = topo.fabric.clone();
    crate::placement::auto_place(&mut f, nodes);
    let mut s = String::from("[placement]\n");
    for p in 0..nodes {
        let names: Vec<String> = f.nodes.iter().filter(|n| n.placement == p).map(|n| format!("\"{}\"", n.name)).collect();
        s.push_str(&format!("p{p:04} = [{}]\n", names.join(", ")));
    }
    s
}

/// Renders the manifests for `topo` (its file's text `topology_toml`) with
/// a fresh identity and token.
pub fn render(topo: &Topology, topology_toml: &str, o: &RenderOptions) -> Result<Manifests, K8sError> {
    let identity = FabricIdentity::generate()?;
    let token = crate::config::identity::new_token();
    render_with(topo, topology_toml, o, &identity, &token)
}

/// [`render`] with a given identity and token.
pub fn render_with(
    topo: &Topology,
    topology_toml: &str,
    o: &RenderOptions,
    identity: &FabricIdentity,
    token: &str,
) -> Result<Manifests, K8sError> {
    let ns = o.namespace.as_str();
    let app = ("app.kubernetes.io/name", "weft".to_string());
    let fabric = ("weft.dev/fabric", topo.fabric.name.clone());
    let json = |v: Result<serde_json::Value, serde_json::Error>| v.map_err(K8sError::Json);
    let mut out: Manifests = Vec::new();

    let namespace = Namespace { metadata: meta(ns, None, &[app.clone(), fabric.clone()]), ..Default::default() };
    out.push(("00-namespace.json".into(), json(serde_json::to_value(&namespace))?));

    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: meta("weft-fabric", Some(ns), &[app.clone(), fabric.clone()]),
        data: Some(BTreeMap::from([
            ("cert.der".to_string(), ByteString(identity.cert_der.clone())),
            ("key.der".to_string(), ByteString(identity.key_der.clone())),
            ("token".to_string(), ByteString(token.as_bytes().to_vec())),
        ])),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    out.push(("01-secret.json".into(), json(serde_json::to_value(&secret))?));

    let plan = ConfigMap {
        metadata: meta("weft-plan", Some(ns), &[app.clone(), fabric.clone()]),
        data: Some(BTreeMap::from([
            ("topology.toml".to_string(), topology_toml.to_string()),
            ("placement.toml".to_string(), placement_toml(topo, o.nodes)),
        ])),
        ..Default::default()
    };
    out.push(("02-plan.json".into(), json(serde_json::to_value(&plan))?));

    let secret_volume = Volume {
        name: "fabric".into(),
        secret: Some(SecretVolumeSource { secret_name: Some("weft-fabric".into()), ..Default::default() }),
        ..Default::default()
    };
    let secret_mount =
        VolumeMount { name: "fabric".into(), mount_path: "/weft/fabric".into(), read_only: Some(true), ..Default::default() };
    let privileged = SecurityContext { privileged: Some(true), ..Default::default() };

    let orch_labels = [app.clone(), fabric.clone(), ("weft.dev/role", "orchestrator".to_string())];
    let orchestrator = Pod {
        metadata: meta("weft-orchestrator", Some(ns), &orch_labels),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            containers: vec![Container {
                name: "weft".into(),
                image: Some(o.image.clone()),
                command: Some(
                    [
                        "weft",
                        "up",
                        "/weft/plan/topology.toml",
                        "--placement",
                        "/weft/plan/placement.toml",
                        "--external-nodes",
                        &o.nodes.to_string(),
                        "--identity-dir",
                        "/weft/fabric",
                        "--control-listen",
                        &format!("0.0.0.0:{CONTROL_PORT}"),
                        "--links",
                        &o.links,
                        "--metrics",
                        &format!("0.0.0.0:{METRICS_PORT}"),
                        "--metrics-tls",
                    ]
                    .map(String::from)
                    .to_vec(),
                ),
                volume_mounts: Some(vec![
                    VolumeMount { name: "plan".into(), mount_path: "/weft/plan".into(), read_only: Some(true), ..Default::default() },
                    secret_mount.clone(),
                ]),
                ..Default::default()
            }],
            volumes: Some(vec![
                Volume {
                    name: "plan".into(),
                    config_map: Some(ConfigMapVolumeSource { name: "weft-plan".into(), ..Default::default() }),
                    ..Default::default()
                },
                secret_volume.clone(),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    out.push(("10-orchestrator.json".into(), json(serde_json::to_value(&orchestrator))?));

    let control = Service {
        metadata: meta("weft-control", Some(ns), &[app.clone(), fabric.clone()]),
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([("weft.dev/role".to_string(), "orchestrator".to_string())])),
            ports: Some(vec![ServicePort {
                name: Some("quic".into()),
                protocol: Some("UDP".into()),
                port: CONTROL_PORT as i32,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    out.push(("11-control-service.json".into(), json(serde_json::to_value(&control))?));

    let control_host = format!("weft-control.{ns}.svc.cluster.local:{CONTROL_PORT}");
    for p in 0..o.nodes {
        let labels = [app.clone(), fabric.clone(), ("weft.dev/role", "emu-node".to_string()), ("weft.dev/process", p.to_string())];
        let mut m = meta(&format!("weft-emu-node-{p}"), Some(ns), &labels);
        m.annotations = Some(BTreeMap::from([
            ("prometheus.io/scrape".to_string(), "true".to_string()),
            ("prometheus.io/port".to_string(), (METRICS_PORT as u32 + p).to_string()),
        ]));
        let pod = Pod {
            metadata: m,
            spec: Some(PodSpec {
                restart_policy: Some("Never".into()),
                // DNS name weft-emu-node-p.weft-metrics.<ns>.svc.cluster.local.
                hostname: Some(format!("weft-emu-node-{p}")),
                subdomain: Some("weft-metrics".into()),
                containers: vec![Container {
                    name: "emu-node".into(),
                    image: Some(o.image.clone()),
                    command: Some(
                        [
                            "emu-node",
                            "--control",
                            &control_host,
                            "--pin",
                            &identity.pin(),
                            "--process",
                            &p.to_string(),
                            "--bind",
                            "$(POD_IP)",
                            "--token-file",
                            "/weft/fabric/token",
                        ]
                        .map(String::from)
                        .to_vec(),
                    ),
                    env: Some(vec![EnvVar {
                        name: "POD_IP".into(),
                        value_from: Some(EnvVarSource {
                            field_ref: Some(ObjectFieldSelector { field_path: "status.podIP".into(), ..Default::default() }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    security_context: Some(privileged.clone()),
                    volume_mounts: Some(vec![secret_mount.clone()]),
                    ..Default::default()
                }],
                volumes: Some(vec![secret_volume.clone()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        out.push((format!("20-emu-node-{p:04}.json"), json(serde_json::to_value(&pod))?));
    }

    let metrics = Service {
        metadata: meta("weft-metrics", Some(ns), &[app.clone(), fabric.clone()]),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(BTreeMap::from([("weft.dev/role".to_string(), "emu-node".to_string())])),
            ports: Some(
                (0..o.nodes)
                    .map(|p| ServicePort {
                        name: Some(format!("metrics-{p}")),
                        protocol: Some("TCP".into()),
                        port: (METRICS_PORT as u32 + p) as i32,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    out.push(("30-metrics-service.json".into(), json(serde_json::to_value(&metrics))?));

    // A Prometheus of the fabric's own, with the certificate and token (not
    // the private key) to scrape the emu-nodes.
    let scrape = k8s_openapi::api::core::v1::Secret {
        metadata: meta("weft-metrics-scrape", Some(ns), &[app.clone(), fabric.clone()]),
        data: Some(BTreeMap::from([
            ("ca.pem".to_string(), ByteString(identity.cert_pem().into_bytes())),
            ("token".to_string(), ByteString(token.as_bytes().to_vec())),
        ])),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    out.push(("40-prometheus-scrape-secret.json".into(), json(serde_json::to_value(&scrape))?));
    let targets: Vec<(String, u32)> =
        (0..o.nodes).map(|p| (format!("weft-emu-node-{p}.weft-metrics.{ns}.svc.cluster.local:{}", METRICS_PORT as u32 + p), p)).collect();
    let yml = crate::observe::prometheus::cluster_config(
        &topo.fabric.name,
        &targets,
        "/weft/scrape/ca.pem",
        "/weft/scrape/token",
        std::time::Duration::from_secs(1),
    );
    let prom_config = ConfigMap {
        metadata: meta("weft-prometheus", Some(ns), &[app.clone(), fabric.clone()]),
        data: Some(BTreeMap::from([("prometheus.yml".to_string(), yml)])),
        ..Default::default()
    };
    out.push(("41-prometheus-config.json".into(), json(serde_json::to_value(&prom_config))?));
    let prom_labels = [app.clone(), fabric.clone(), ("weft.dev/role", "prometheus".to_string())];
    let mount = |name: &str, path: &str| VolumeMount { name: name.into(), mount_path: path.into(), ..Default::default() };
    let prometheus = Pod {
        metadata: meta("weft-prometheus", Some(ns), &prom_labels),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "prometheus".into(),
                image: Some(o.prometheus_image.clone()),
                command: Some(
                    [
                        "prometheus",
                        "--config.file=/weft/prometheus/prometheus.yml",
                        "--storage.tsdb.path=/prometheus",
                        &format!("--web.listen-address=0.0.0.0:{PROMETHEUS_PORT}"),
                    ]
                    .map(String::from)
                    .to_vec(),
                ),
                volume_mounts: Some(vec![
                    mount("config", "/weft/prometheus"),
                    mount("scrape", "/weft/scrape"),
                    mount("data", "/prometheus"),
                ]),
                ..Default::default()
            }],
            volumes: Some(vec![
                Volume {
                    name: "config".into(),
                    config_map: Some(ConfigMapVolumeSource { name: "weft-prometheus".into(), ..Default::default() }),
                    ..Default::default()
                },
                Volume {
                    name: "scrape".into(),
                    secret: Some(SecretVolumeSource { secret_name: Some("weft-metrics-scrape".into()), ..Default::default() }),
                    ..Default::default()
                },
                Volume { name: "data".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    out.push(("42-prometheus.json".into(), json(serde_json::to_value(&prometheus))?));
    let prom_service = Service {
        metadata: meta("weft-prometheus", Some(ns), &[app.clone(), fabric.clone()]),
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([("weft.dev/role".to_string(), "prometheus".to_string())])),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: PROMETHEUS_PORT as i32,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    out.push(("43-prometheus-service.json".into(), json(serde_json::to_value(&prom_service))?));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;

    fn rendered() -> (Manifests, Topology, FabricIdentity) {
        let topo = Topology::load("leaf-spine-2x4-rt").unwrap();
        let identity = FabricIdentity::generate().unwrap();
        let o = RenderOptions {
            namespace: "weft-test".into(),
            image: "weft:test".into(),
            prometheus_image: PROMETHEUS_IMAGE.into(),
            nodes: 3,
            links: "udp".into(),
        };
        (render_with(&topo, "# the topology file\n", &o, &identity, "0123456789abcdef0123456789abcdef").unwrap(), topo, identity)
    }

    fn get<T: serde::de::DeserializeOwned>(m: &Manifests, file: &str) -> T {
        let v = m.iter().find(|(f, _)| f == file).unwrap_or_else(|| panic!("no {file}")).1.clone();
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{file} is not a valid object: {e}"))
    }

    #[test]
    fn the_manifests_deserialize_into_kubernetes_objects_and_carry_the_plan() {
        let (m, topo, identity) = rendered();
        assert_eq!(
            m.len(),
            3 + 2 + 3 + 1 + 4,
            "namespace, secret, plan, orchestrator + service, 3 emu-nodes, metrics service, Prometheus secret + config + pod + service"
        );
        for (f, v) in &m {
            assert!(v["apiVersion"] == "v1" && v["kind"].is_string(), "{f}: {v}");
        }
        let ns: Namespace = get(&m, "00-namespace.json");
        assert_eq!(ns.metadata.name.as_deref(), Some("weft-test"));
        let secret: Secret = get(&m, "01-secret.json");
        let data = secret.data.unwrap();
        assert_eq!(data["cert.der"].0, identity.cert_der);
        assert_eq!(data["token"].0, b"0123456789abcdef0123456789abcdef");
        // The plan: the topology file and the placement the orchestrator applies.
        let plan: ConfigMap = get(&m, "02-plan.json");
        let data = plan.data.unwrap();
        assert_eq!(data["topology.toml"], "# the topology file\n");
        let mut placed = topo.clone();
        placed.apply_placement("placement.toml", &data["placement.toml"]).unwrap();
        let mut auto = topo.fabric.clone();
        crate::placement::auto_place(&mut auto, 3);
        let by_name = |f: &emu_node::fabric::FabricSpec| f.nodes.iter().map(|n| (n.name.clone(), n.placement)).collect::<Vec<_>>();
        assert_eq!(by_name(&placed.fabric), by_name(&auto));
        // The orchestrator waits for 3 emu-nodes with the Secret's identity.
        let orch: Pod = get(&m, "10-orchestrator.json");
        let cmd = orch.spec.unwrap().containers[0].command.clone().unwrap().join(" ");
        assert!(cmd.contains("--external-nodes 3") && cmd.contains("--identity-dir /weft/fabric"), "{cmd}");
        // Each emu-node pod: its process, the Secret's pin, privileged.
        for p in 0..3 {
            let pod: Pod = get(&m, &format!("20-emu-node-{p:04}.json"));
            let c = &pod.spec.unwrap().containers[0];
            let cmd = c.command.clone().unwrap().join(" ");
            assert!(cmd.contains(&format!("--process {p}")) && cmd.contains(&identity.pin()) && cmd.contains("--bind $(POD_IP)"), "{cmd}");
            assert_eq!(c.security_context.as_ref().and_then(|s| s.privileged), Some(true));
        }
        let metrics: Service = get(&m, "30-metrics-service.json");
        assert_eq!(metrics.spec.unwrap().ports.unwrap().len(), 3);
        assert!(cmd.contains("--metrics-tls"), "the emu-nodes' /metrics need the token: {cmd}");
        // The Prometheus: the certificate and token, never the private key;
        // every emu-node pod's DNS name over HTTPS.
        let scrape: Secret = get(&m, "40-prometheus-scrape-secret.json");
        let data = scrape.data.unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["ca.pem", "token"]);
        assert_eq!(String::from_utf8_lossy(&data["ca.pem"].0), identity.cert_pem());
        let config: ConfigMap = get(&m, "41-prometheus-config.json");
        let yml = &config.data.unwrap()["prometheus.yml"];
        for p in 0..3 {
            assert!(yml.contains(&format!("weft-emu-node-{p}.weft-metrics.weft-test.svc.cluster.local:{}", 9100 + p)), "{yml}");
        }
        assert!(yml.contains("scheme: https") && yml.contains("credentials_file: '/weft/scrape/token'"), "{yml}");
        let prom: Pod = get(&m, "42-prometheus.json");
        let c = &prom.spec.unwrap().containers[0];
        assert_eq!(c.command.as_ref().unwrap()[0], "prometheus");
        let _: Service = get(&m, "43-prometheus-service.json");
    }
}
