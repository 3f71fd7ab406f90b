//! Kubernetes names for `serve`'s series: with `--group-by cgroup`, a group whose cgroup
//! names a pod UID (and a container id) is labelled `namespace`, `pod` and `container` too,
//! from this node's pod list, read every [`REFRESH`] (and sooner, at most every
//! [`MIN_GAP`], the first time a scrape meets a pod or container the list did not name).
//!
//! The default source is the API server of the cluster cg-trace runs in, asked for the pods
//! of its node (`GET /api/v1/pods?fieldSelector=spec.nodeName=NODE`, the node from the
//! downward API's `NODE_NAME`) with the pod's service account: that needs only get and list
//! on pods, and the API server's certificate is the one the account's `ca.crt` signs for
//! `KUBERNETES_SERVICE_HOST`. The kubelet's own `/pods` (`--kube-pods-url
//! https://NODE:10250/pods`) needs `nodes/proxy`, which also opens the kubelet's exec and
//! logs, and kubelets often serve a self-signed certificate: it is the option, not the
//! default.

pub mod https;
pub mod pods;

use std::{
    collections::HashSet,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use self::{https::Url, pods::PodNames};
use crate::{console, printable};

/// Where a pod's service account token and CA are mounted.
pub const DEFAULT_CREDENTIALS: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How often the pod list is read.
pub const REFRESH: Duration = Duration::from_secs(30);
/// The shortest time between two reads (a scrape asking for names sooner waits for it).
pub const MIN_GAP: Duration = Duration::from_secs(5);
/// How long one read may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest pod list read (a node's 110 pods take about 1 to 3 MB).
const MAX_BODY: usize = 16 << 20;

/// `--kube-pods-url`: where the pod list comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodsUrl {
    Off,
    Url(Url),
}

impl std::str::FromStr for PodsUrl {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text == "off" {
            return Ok(PodsUrl::Off);
        }
        Url::parse(text).map(PodsUrl::Url)
    }
}

/// Where and how to read the pod list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeConfig {
    pub url: Url,
    /// The directory with `token` and `ca.crt`.
    pub credentials: PathBuf,
}

/// The pod list's source: the URL given, else the in-cluster API server that `env`'s
/// `KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT` and `NODE_NAME` name. None outside a
/// cluster or when off; an error (a note to print) when in a cluster without a node name.
pub fn config(
    url: Option<PodsUrl>,
    credentials: PathBuf,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<KubeConfig>, String> {
    let url = match url {
        Some(PodsUrl::Off) => return Ok(None),
        Some(PodsUrl::Url(url)) => url,
        None => {
            let Some(host) = env("KUBERNETES_SERVICE_HOST").filter(|h| !h.is_empty()) else {
                return Ok(None);
            };
            let port = env("KUBERNETES_SERVICE_PORT").unwrap_or_else(|| "443".into());
            let node = env("NODE_NAME").unwrap_or_default();
            if !is_node_name(&node) {
                return Err(format!(
                    "no namespace, pod and container labels: NODE_NAME ({:?}) does not name this \
                     node; set it from the downward API (env NODE_NAME, fieldRef spec.nodeName, \
                     as deploy/kubernetes/cg-trace.yaml does)",
                    printable::fit(&node, 100)
                ));
            }
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            Url::parse(&format!(
                "https://{host}:{port}/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"
            ))
            .map_err(|e| {
                format!("no namespace, pod and container labels: the API server's address {e}")
            })?
        }
    };
    Ok(Some(KubeConfig { url, credentials }))
}

/// A node name as Kubernetes allows it (a DNS subdomain: lowercase letters, digits, `-`, `.`).
fn is_node_name(name: &str) -> bool {
    (1..=253).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
}

/// Pods and containers remembered as asked about at most (then forgotten, and asked again).
const MAX_ASKED: usize = 4 * pods::MAX_PODS;

/// The names known, shared by the reader and the scrapes.
#[derive(Debug, Default)]
pub struct PodCache {
    names: Mutex<PodNames>,
    /// `pod UID/container id` a scrape asked for a read about: each is asked once, so that a
    /// cgroup no list names (a pod's sandbox) does not have the list read every few seconds.
    asked: Mutex<HashSet<String>>,
    pub(super) refresh: tokio::sync::Notify,
}

impl PodCache {
    /// `f` on the names known now (none if a holder panicked).
    pub fn with_names<R>(&self, f: impl FnOnce(&PodNames) -> R) -> Option<R> {
        self.names.lock().ok().map(|names| f(&names))
    }

    /// Takes a list read at `now` ([`PodNames::update`]).
    pub fn update(&self, listed: Vec<pods::Pod>, now: Instant, retain: Duration) {
        if let Ok(mut names) = self.names.lock() {
            names.update(listed, now, retain);
        }
    }

    /// Asks for the list to be read again (at most every [`MIN_GAP`]) for a pod or a
    /// container of it that the names lack, the first time it is asked about.
    pub fn ask_refresh(&self, pod_uid: &str, container_id: Option<&str>) {
        let Ok(mut asked) = self.asked.lock() else {
            return;
        };
        if asked.len() >= MAX_ASKED {
            asked.clear();
        }
        if asked.insert(format!("{pod_uid}/{}", container_id.unwrap_or_default())) {
            self.refresh.notify_one();
        }
    }
}

/// One read of the pod list, bounded in time.
async fn fetch(config: &KubeConfig) -> Result<Vec<pods::Pod>, String> {
    let body = tokio::time::timeout(
        FETCH_TIMEOUT,
        https::get(&config.url, &config.credentials, MAX_BODY),
    )
    .await
    .map_err(|_| {
        format!(
            "{} did not answer within {} s",
            config.url,
            FETCH_TIMEOUT.as_secs()
        )
    })?
    .map_err(|e| e.to_string())?;
    // Megabytes of JSON: parsed off the runtime that answers the scrapes.
    let parsed = tokio::task::spawn_blocking(move || pods::parse(&body))
        .await
        .map_err(|e| format!("{}: {e}", config.url))?;
    parsed.map_err(|e| format!("{}: {e}", config.url))
}

/// Reads the pod list into `cache` until the runtime stops: at once, then every
/// [`REFRESH`], or after [`MIN_GAP`] when asked. Pods no longer listed keep their names for
/// `retain`. A failure is said once (and the recovery after it); the series keep their
/// pod_uid and container_id labels meanwhile, and the reads go on.
pub async fn keep_fresh(config: KubeConfig, cache: Arc<PodCache>, retain: Duration) {
    let mut failing = false;
    loop {
        let started = tokio::time::Instant::now();
        match fetch(&config).await {
            Ok(listed) => {
                let count = listed.len();
                cache.update(listed, Instant::now(), retain);
                if failing {
                    console::say(format_args!(
                        "the pod list is read again ({count} pods): series get namespace, pod \
                         and container labels"
                    ));
                }
                failing = false;
            }
            Err(err) => {
                if !failing {
                    console::warn(format_args!(
                        "cannot read this node's pod list: {err}; series keep their pod_uid and \
                         container_id labels without namespace, pod and container, and it is \
                         tried again every {} s",
                        REFRESH.as_secs()
                    ));
                }
                failing = true;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(REFRESH) => {}
            () = cache.refresh.notified(), if !failing => {
                tokio::time::sleep_until(started + MIN_GAP).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |key| vars.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    #[test]
    fn in_a_cluster_the_api_server_is_asked_for_this_node_s_pods() {
        let credentials = PathBuf::from(DEFAULT_CREDENTIALS);
        let in_pod = env(&[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("NODE_NAME", "node-a.example"),
        ]);
        let config = config(None, credentials.clone(), &in_pod).unwrap().unwrap();
        assert_eq!(
            config.url.to_string(),
            "https://10.96.0.1:443/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a.example"
        );
        let v6 = env(&[("KUBERNETES_SERVICE_HOST", "fd00::1"), ("NODE_NAME", "n")]);
        assert_eq!(
            super::config(None, credentials.clone(), &v6)
                .unwrap()
                .unwrap()
                .url
                .host,
            "fd00::1"
        );
        // Outside a cluster, or off: no names, nothing said.
        assert_eq!(
            super::config(None, credentials.clone(), &env(&[])),
            Ok(None)
        );
        assert_eq!(
            super::config(Some(PodsUrl::Off), credentials.clone(), &in_pod),
            Ok(None)
        );
        // The URL given wins.
        let kubelet: PodsUrl = "https://node-a:10250/pods".parse().unwrap();
        let given = super::config(Some(kubelet), credentials.clone(), &in_pod).unwrap();
        assert_eq!(given.unwrap().url.to_string(), "https://node-a:10250/pods");
        // In a cluster without a node name (or a forged one): said, with what to set.
        for node in [None, Some("Node_A"), Some("a&watch=true")] {
            let mut vars = vec![("KUBERNETES_SERVICE_HOST", "10.96.0.1")];
            vars.extend(node.map(|n| ("NODE_NAME", n)));
            let err = super::config(None, credentials.clone(), &env(&vars)).unwrap_err();
            assert!(
                err.contains("NODE_NAME") && err.contains("spec.nodeName"),
                "{err}"
            );
        }
    }
}
