//! This node's pod list (a Kubernetes `PodList`, from the API server or the kubelet) turned
//! into the names `serve` labels series with: by pod UID, the namespace and pod name, and
//! each container's name by its container id. Pure: no I/O, the caller passes the time in.
//!
//! The list is outside data: only the fields read here are kept, each pod and container
//! checked (a UID and a container id of the shapes cgroup paths use, names made printable
//! and cut to [`MAX_LABEL_CHARS`]), and the pods remembered are bounded ([`MAX_PODS`]).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use serde::Deserialize;

use crate::{cgroup, printable};

/// Pods remembered at most (a kubelet runs 110 by default, a few hundred when told to).
pub const MAX_PODS: usize = 2048;
/// Containers remembered per pod at most.
pub const MAX_CONTAINERS: usize = 64;
/// Longest label value kept, in characters (a Kubernetes name is at most 253).
pub const MAX_LABEL_CHARS: usize = 253;

/// Why a pod list could not be read.
#[derive(Debug, thiserror::Error)]
#[error("not a PodList: {0}")]
pub struct PodListError(String);

/// One pod of the list: what the series need.
#[derive(Clone, Debug, PartialEq)]
pub struct Pod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `(container id, container name)`.
    pub containers: Vec<(String, String)>,
}

/// The names a series of a pod's group gets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Names<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    /// Absent for a cgroup of the pod that is no container of its list (the sandbox).
    pub container: Option<&'a str>,
}

// The PodList's shape, only the fields read (serde skips the others).
#[derive(Deserialize)]
struct PodList {
    #[serde(default)]
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    metadata: Metadata,
    #[serde(default)]
    status: Status,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    annotations: Annotations,
}

/// A static pod (a manifest on the node) runs under the kubelet's own UID for it, which
/// its mirror pod in the API server carries in this annotation (the pod's `uid` is another).
#[derive(Default, Deserialize)]
struct Annotations {
    #[serde(rename = "kubernetes.io/config.mirror")]
    mirror: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    #[serde(default)]
    container_statuses: Vec<ContainerStatus>,
    #[serde(default)]
    init_container_statuses: Vec<ContainerStatus>,
    #[serde(default)]
    ephemeral_container_statuses: Vec<ContainerStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStatus {
    #[serde(default)]
    name: String,
    /// `containerd://<64 hex>`, `cri-o://...`, `docker://...`; absent until it started.
    #[serde(rename = "containerID")]
    container_id: Option<String>,
}

/// The pods of a `PodList` body, each under its UID and, for a static pod's mirror, under
/// the UID the kubelet runs it with too. Pods without a usable UID, namespace or name are
/// left out; at most [`MAX_PODS`].
pub fn parse(body: &[u8]) -> Result<Vec<Pod>, PodListError> {
    let list: PodList = serde_json::from_slice(body).map_err(|e| PodListError(e.to_string()))?;
    let mut pods = Vec::new();
    for item in list.items {
        let (Some(namespace), Some(name)) =
            (label(&item.metadata.namespace), label(&item.metadata.name))
        else {
            continue;
        };
        let status = &item.status;
        let containers: Vec<(String, String)> = status
            .container_statuses
            .iter()
            .chain(&status.init_container_statuses)
            .chain(&status.ephemeral_container_statuses)
            .filter_map(|c| Some((container_id(c.container_id.as_deref()?)?, label(&c.name)?)))
            .take(MAX_CONTAINERS)
            .collect();
        for uid in [
            Some(item.metadata.uid.as_str()),
            item.metadata.annotations.mirror.as_deref(),
        ]
        .into_iter()
        .flatten()
        .filter(|uid| is_uid(uid))
        {
            pods.push(Pod {
                uid: uid.to_owned(),
                namespace: namespace.clone(),
                name: name.clone(),
                containers: containers.clone(),
            });
        }
        if pods.len() >= MAX_PODS {
            pods.truncate(MAX_PODS);
            break;
        }
    }
    Ok(pods)
}

/// A name as a label value: printable, at most [`MAX_LABEL_CHARS`]; none when empty.
fn label(name: &str) -> Option<String> {
    (!name.is_empty()).then(|| printable::fit(name, MAX_LABEL_CHARS))
}

/// The id of `runtime://id` when it is a container id as cgroup paths name them.
fn container_id(uri: &str) -> Option<String> {
    let (_, id) = uri.split_once("://")?;
    cgroup::is_container_id(id).then(|| id.to_owned())
}

/// A pod UID as `cgroup::classify` gives it: lowercase hex and dashes (a mirror's hash: hex).
fn is_uid(uid: &str) -> bool {
    (8..=64).contains(&uid.len())
        && uid
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f' | b'-'))
}

/// The pods known: those of the latest list, and those no longer listed for `retain` after
/// they were last (their groups keep series for serve's grace time: their labels stay).
#[derive(Debug, Default)]
pub struct PodNames {
    pods: HashMap<String, (Pod, Instant)>,
}

impl PodNames {
    /// Takes a new list read at `now`: its pods are known as listed; pods not listed for
    /// longer than `retain` are forgotten, and the longest unlisted first when more than
    /// [`MAX_PODS`] are known.
    pub fn update(&mut self, listed: Vec<Pod>, now: Instant, retain: Duration) {
        for pod in listed {
            self.pods.insert(pod.uid.clone(), (pod, now));
        }
        self.pods
            .retain(|_, (_, seen)| now.saturating_duration_since(*seen) <= retain);
        if self.pods.len() > MAX_PODS {
            let mut by_age: Vec<(Instant, String)> = self
                .pods
                .iter()
                .map(|(uid, (_, seen))| (*seen, uid.clone()))
                .collect();
            by_age.sort();
            for (_, uid) in by_age.iter().take(self.pods.len() - MAX_PODS) {
                self.pods.remove(uid);
            }
        }
    }

    /// The names of the pod `pod_uid`, with the container's when `container_id` is one of
    /// its containers.
    pub fn names(&self, pod_uid: &str, container_id: Option<&str>) -> Option<Names<'_>> {
        let (pod, _) = self.pods.get(pod_uid)?;
        let container = container_id.and_then(|id| {
            pod.containers
                .iter()
                .find(|(known, _)| known == id)
                .map(|(_, name)| name.as_str())
        });
        Some(Names {
            namespace: &pod.namespace,
            pod: &pod.name,
            container,
        })
    }

    /// Whether a newer list might name more: the pod is unknown, or the container is not
    /// among its containers yet (a container started or restarted since the list was read).
    pub fn lacks(&self, pod_uid: &str, container_id: Option<&str>) -> bool {
        match self.names(pod_uid, container_id) {
            None => true,
            Some(names) => container_id.is_some() && names.container.is_none(),
        }
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const POD_UID: &str = "1b2c3d4e-5f60-4718-a93b-4c5d6e7f8091";
    pub const CONTAINER_ID: &str =
        "3f4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718";
    const SIDECAR_ID: &str = "aa4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f607aa";
    const INIT_ID: &str = "bb4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f607bb";
    const MIRROR_HASH: &str = "9d4f6b1e0c2a3b5d7e8f9a0b1c2d3e4f";
    const MIRROR_CONTAINER_ID: &str =
        "cc4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f607cc";

    /// The recorded-shape pod list with its placeholders filled in.
    pub fn fixture() -> String {
        include_str!("testdata/podlist.json")
            .replace("INIT_CONTAINER_ID", INIT_ID)
            .replace("SIDECAR_CONTAINER_ID", SIDECAR_ID)
            .replace("MIRROR_CONTAINER_ID", MIRROR_CONTAINER_ID)
            .replace("CONTAINER_ID", CONTAINER_ID)
            .replace("POD_UID", POD_UID)
            .replace("MIRROR_HASH", MIRROR_HASH)
            .replace("NODE_NAME", "node-a")
    }

    fn known(body: &str) -> PodNames {
        let mut names = PodNames::default();
        names.update(
            parse(body.as_bytes()).unwrap(),
            Instant::now(),
            Duration::from_secs(60),
        );
        names
    }

    #[test]
    fn names_pods_and_their_containers_by_uid_and_container_id() {
        let names = known(&fixture());
        let name = |uid, id| names.names(uid, id);
        assert_eq!(
            name(POD_UID, Some(CONTAINER_ID)),
            Some(Names {
                namespace: "shop",
                pod: "web-6d4cf56db6-8xk2p",
                container: Some("nginx"),
            })
        );
        assert_eq!(
            name(POD_UID, Some(SIDECAR_ID)).unwrap().container,
            Some("log-shipper")
        );
        assert_eq!(
            name(POD_UID, Some(INIT_ID)).unwrap().container,
            Some("migrate")
        );
        // The pod's own cgroup, or a container the list does not name: the pod's names.
        let other = "d".repeat(64);
        let sandbox = name(POD_UID, Some(&other)).unwrap();
        assert_eq!(
            (sandbox.pod, sandbox.container),
            ("web-6d4cf56db6-8xk2p", None)
        );
        assert!(names.lacks(POD_UID, Some(&other)));
        assert!(!names.lacks(POD_UID, Some(CONTAINER_ID)));
        assert!(!names.lacks(POD_UID, None));
        // A static pod: under the UID the kubelet runs it with (the mirror annotation).
        let static_pod = name(MIRROR_HASH, Some(MIRROR_CONTAINER_ID)).unwrap();
        assert_eq!(
            (static_pod.namespace, static_pod.pod, static_pod.container),
            (
                "kube-system",
                "kube-apiserver-node-a",
                Some("kube-apiserver")
            )
        );
        // A pending pod's container has no id yet: the pod is known, no container.
        let pending = name("5e6f7081-92a3-4b4c-9d5e-6f708192a3b4", None).unwrap();
        assert_eq!(pending.namespace, "batch");
        assert!(names.lacks("0000aaaa-0000-0000-0000-000000000000", None));
        // Three items, the static one under two UIDs.
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn hostile_names_are_made_printable_and_bounded_and_bad_ids_left_out() {
        let long = "n".repeat(1000);
        let body = format!(
            r#"{{"items": [
                {{"metadata": {{"namespace": "evil\u001b]52;c;payload\u0007", "name": "{long}",
                  "uid": "{POD_UID}"}},
                  "status": {{"containerStatuses": [
                    {{"name": "a\nb", "containerID": "containerd://{CONTAINER_ID}"}},
                    {{"name": "bad-id", "containerID": "containerd://../../etc"}},
                    {{"name": "no-scheme", "containerID": "{SIDECAR_ID}"}}]}}}},
                {{"metadata": {{"namespace": "x", "name": "y", "uid": "../../etc/passwd"}}}},
                {{"metadata": {{"namespace": "", "name": "y", "uid": "{SIDECAR_ID}"}}}}
            ]}}"#
        );
        let names = known(&body);
        assert_eq!(names.len(), 1);
        let got = names.names(POD_UID, Some(CONTAINER_ID)).unwrap();
        assert_eq!(got.namespace, "evil\\x1b]52;c;payload\\x07");
        assert_eq!(got.pod.chars().count(), MAX_LABEL_CHARS);
        assert!(got.pod.ends_with('…'));
        assert_eq!(got.container, Some("a\\nb"));
        assert!(
            names
                .names(POD_UID, Some(SIDECAR_ID))
                .unwrap()
                .container
                .is_none()
        );
    }

    #[test]
    fn a_body_that_is_not_a_pod_list_is_refused() {
        for body in ["", "<html>", "{\"items\": 3}", "[1,2]"] {
            assert!(parse(body.as_bytes()).is_err(), "{body}");
        }
        // A Status object (what a refusal carries) has no items: no pods, not an error.
        assert_eq!(parse(br#"{"kind":"Status","code":403}"#).unwrap(), vec![]);
    }

    #[test]
    fn a_pod_no_longer_listed_keeps_its_names_for_the_retention_then_goes() {
        // list:   t=0 [A]     t=30 []      t=70 []
        // known:      A          A (30<=60)   - (70>60)
        let pod = |uid: &str| Pod {
            uid: uid.into(),
            namespace: "ns".into(),
            name: uid.into(),
            containers: vec![],
        };
        let t0 = Instant::now();
        let retain = Duration::from_secs(60);
        let mut names = PodNames::default();
        names.update(vec![pod("aaaaaaaa")], t0, retain);
        names.update(vec![], t0 + Duration::from_secs(30), retain);
        assert!(names.names("aaaaaaaa", None).is_some());
        names.update(vec![], t0 + Duration::from_secs(70), retain);
        assert!(names.is_empty());
    }

    #[test]
    fn at_most_max_pods_are_known_the_longest_unlisted_forgotten_first() {
        let pod = |i: usize| Pod {
            uid: format!("{i:08x}"),
            namespace: "ns".into(),
            name: format!("p{i}"),
            containers: vec![],
        };
        let t0 = Instant::now();
        let retain = Duration::from_secs(3600);
        let mut names = PodNames::default();
        names.update((0..MAX_PODS).map(pod).collect(), t0, retain);
        names.update(
            (MAX_PODS..MAX_PODS + 10).map(pod).collect(),
            t0 + Duration::from_secs(1),
            retain,
        );
        assert_eq!(names.len(), MAX_PODS);
        assert!(
            names
                .names(&format!("{:08x}", MAX_PODS + 9), None)
                .is_some()
        );
        let body = format!(
            r#"{{"items": [{}]}}"#,
            (0..MAX_PODS + 5)
                .map(|i| format!(
                    r#"{{"metadata": {{"namespace": "n", "name": "p", "uid": "{i:08x}"}}}}"#
                ))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(parse(body.as_bytes()).unwrap().len(), MAX_PODS);
    }
}
