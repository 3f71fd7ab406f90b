//! Tests of `deploy/`: every YAML and JSON file parses; the Kubernetes objects carry what the
//! API requires, and only fields it knows (a hand-written check, for the ServiceMonitor too;
//! the core objects also pass kubernetes-validate, the API's own schemas, offline); the
//! DaemonSet, Service and ServiceMonitor select each other and grant exactly the privileges the manifest documents; the
//! Containerfile's unpack stage, run as a shell script on a tarball `cargo xtask dist`
//! packs, installs what its runtime stage copies; the Grafana dashboard queries only metrics
//! cg-trace serve exports and defines every variable it uses, and picks nodes by the label
//! the ServiceMonitor gives the node's name.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use cg_tests::bin;
use serde::Deserialize;
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The documents of a YAML file, as JSON values (empty documents left out).
fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .enumerate()
        .map(|(i, document)| {
            Value::deserialize(document)
                .unwrap_or_else(|e| panic!("{} document {}: {e}", path.display(), i + 1))
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// Every Kubernetes object in deploy/kubernetes, in file order.
fn objects() -> Vec<Value> {
    files_under(&deploy_dir().join("kubernetes"))
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .flat_map(|p| yaml_documents(p))
        .collect()
}

fn object<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} expected");
    found[0]
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {v:#}"))
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not a map: {v}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("a string value").to_owned()))
        .collect()
}

/// Every entry of `selector` is in `labels`, and the selector is not empty.
fn selects(selector: &Value, labels: &Value) -> bool {
    let (selector, labels) = (string_map(selector), string_map(labels));
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Keys of `v` that `known` does not list.
fn unknown_keys(v: &Value, known: &[&str]) -> Vec<String> {
    v.as_object()
        .map(|m| {
            m.keys()
                .filter(|k| !known.contains(&k.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[test]
fn every_yaml_and_json_file_in_deploy_parses() {
    let files = files_under(&deploy_dir());
    let mut parsed = 0;
    for path in &files {
        match path.extension().and_then(|e| e.to_str()) {
            Some("yaml" | "yml") => {
                let documents = yaml_documents(path);
                assert!(!documents.is_empty(), "{}: no document", path.display());
                for d in documents {
                    assert!(d.is_object(), "{}: not a map: {d}", path.display());
                }
                parsed += 1;
            }
            Some("json") => {
                let text = fs::read_to_string(path).unwrap();
                // Not a report: a deploy/ file.
                serde_json::from_str::<Value>(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                parsed += 1;
            }
            _ => {}
        }
    }
    assert!(parsed >= 3, "{files:?}");
}

/// Kinds whose objects belong to no namespace.
const CLUSTER_SCOPED: [&str; 3] = ["Namespace", "ClusterRole", "ClusterRoleBinding"];

#[test]
fn kubernetes_objects_carry_what_the_api_requires_and_no_unknown_field() {
    let objects = objects();
    let namespace = text(object(&objects, "Namespace"), "/metadata/name").to_owned();
    let api_versions = BTreeMap::from([
        ("Namespace", "v1"),
        ("ServiceAccount", "v1"),
        ("Service", "v1"),
        ("DaemonSet", "apps/v1"),
        ("ServiceMonitor", "monitoring.coreos.com/v1"),
        ("ClusterRole", "rbac.authorization.k8s.io/v1"),
        ("ClusterRoleBinding", "rbac.authorization.k8s.io/v1"),
    ]);
    let top_level: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("Namespace", &["apiVersion", "kind", "metadata"][..]),
        (
            "ServiceAccount",
            &[
                "apiVersion",
                "kind",
                "metadata",
                "automountServiceAccountToken",
            ][..],
        ),
        ("Service", &["apiVersion", "kind", "metadata", "spec"][..]),
        ("DaemonSet", &["apiVersion", "kind", "metadata", "spec"][..]),
        (
            "ServiceMonitor",
            &["apiVersion", "kind", "metadata", "spec"][..],
        ),
        (
            "ClusterRole",
            &["apiVersion", "kind", "metadata", "rules"][..],
        ),
        (
            "ClusterRoleBinding",
            &["apiVersion", "kind", "metadata", "roleRef", "subjects"][..],
        ),
    ]);
    for o in &objects {
        let kind = text(o, "/kind");
        let expected = api_versions
            .get(kind)
            .unwrap_or_else(|| panic!("a kind this test does not know: {kind}"));
        assert_eq!(text(o, "/apiVersion"), *expected, "{kind}");
        assert_eq!(
            unknown_keys(o, top_level[kind]),
            Vec::<String>::new(),
            "{kind}"
        );
        let name = text(o, "/metadata/name");
        assert!(is_dns_label(name), "{kind} name {name:?}");
        assert_eq!(
            unknown_keys(
                &o["metadata"],
                &["name", "namespace", "labels", "annotations"]
            ),
            Vec::<String>::new(),
            "{kind} metadata"
        );
        if CLUSTER_SCOPED.contains(&kind) {
            assert!(o["metadata"].get("namespace").is_none(), "{kind} {name}");
        } else {
            assert_eq!(text(o, "/metadata/namespace"), namespace, "{kind} {name}");
        }
        for (key, value) in string_map(&o["metadata"]["labels"]) {
            assert!(
                value.len() <= 63
                    && value
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
                "{kind} label {key}={value:?}"
            );
        }
    }

    let daemonset = object(&objects, "DaemonSet");
    assert_eq!(
        unknown_keys(
            &daemonset["spec"],
            &[
                "selector",
                "template",
                "updateStrategy",
                "minReadySeconds",
                "revisionHistoryLimit"
            ]
        ),
        Vec::<String>::new()
    );
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(
        unknown_keys(
            pod,
            &[
                "serviceAccountName",
                "automountServiceAccountToken",
                "hostPID",
                "tolerations",
                "priorityClassName",
                "terminationGracePeriodSeconds",
                "containers",
                "volumes",
                "nodeSelector",
                "runtimeClassName",
            ]
        ),
        Vec::<String>::new(),
        "pod spec"
    );
    let containers = pod["containers"].as_array().expect("containers");
    assert!(!containers.is_empty());
    for c in containers {
        assert_eq!(
            unknown_keys(
                c,
                &[
                    "name",
                    "image",
                    "imagePullPolicy",
                    "args",
                    "command",
                    "ports",
                    "readinessProbe",
                    "livenessProbe",
                    "resources",
                    "securityContext",
                    "volumeMounts",
                    "env",
                ]
            ),
            Vec::<String>::new(),
            "container"
        );
        assert!(is_dns_label(text(c, "/name")));
        let image = text(c, "/image");
        let tag = image.rsplit_once(':').map(|(_, tag)| tag);
        assert!(
            tag.is_some_and(|t| !t.is_empty() && t != "latest" && !t.contains('/')),
            "image {image:?}: pin a version"
        );
        assert_eq!(
            unknown_keys(
                &c["securityContext"],
                &[
                    "privileged",
                    "allowPrivilegeEscalation",
                    "readOnlyRootFilesystem",
                    "runAsUser",
                    "runAsGroup",
                    "runAsNonRoot",
                    "capabilities",
                    "seccompProfile",
                ]
            ),
            Vec::<String>::new(),
            "securityContext"
        );
    }
    let service = object(&objects, "Service");
    assert_eq!(
        unknown_keys(&service["spec"], &["clusterIP", "selector", "ports"]),
        Vec::<String>::new()
    );
    let monitor = object(&objects, "ServiceMonitor");
    assert_eq!(
        unknown_keys(
            &monitor["spec"],
            &["selector", "namespaceSelector", "endpoints", "jobLabel"]
        ),
        Vec::<String>::new()
    );
    for endpoint in monitor["spec"]["endpoints"].as_array().unwrap() {
        assert_eq!(
            unknown_keys(
                endpoint,
                &[
                    "port",
                    "path",
                    "interval",
                    "scrapeTimeout",
                    "relabelings",
                    "scheme"
                ]
            ),
            Vec::<String>::new()
        );
    }
}

/// `kubernetes-validate` (PyPI), which `cargo xtask setup` installs in a venv under target/.
fn kubernetes_validate() -> Command {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/kubernetes-validate/bin/kubernetes-validate");
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask setup` (it installs kubernetes-validate)",
        path.display()
    );
    let mut command = Command::new(path);
    command.args(["--strict", "--kubernetes-version", "1.37"]);
    command
}

/// kubernetes-validate's verdict on a file: whether it passed, and what it printed.
fn validate(file: &Path) -> (bool, String) {
    let output = kubernetes_validate().arg(file).output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

/// The objects of the core API (not the ServiceMonitor, a custom resource whose schema it
/// does not carry) pass the Kubernetes 1.37 schemas, rejecting unknown fields; a DaemonSet
/// with one field the API does not know fails, so the check is not empty.
#[test]
fn core_kubernetes_objects_pass_the_api_schemas_strictly() {
    let manifest = deploy_dir().join("kubernetes/cg-trace.yaml");
    let (passed, said) = validate(&manifest);
    assert!(passed, "{said}");
    // A resource without a schema is only a warning to it: none may be here.
    assert!(!said.contains("WARN"), "{said}");
    for resource in [
        "daemonset/cg-trace",
        "service/cg-trace",
        "clusterrole/cg-trace-pod-reader",
        "clusterrolebinding/cg-trace-pod-reader",
    ] {
        assert!(
            said.contains(&format!(
                "passed for resource {resource} against version 1.37"
            )),
            "{resource} not validated: {said}"
        );
    }
    let mut daemonset = object(&yaml_documents(&manifest), "DaemonSet").clone();
    daemonset["spec"]["template"]["spec"]["hostPIDs"] = Value::Bool(true);
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("daemonset.yaml");
    // JSON is YAML.
    fs::write(&broken, serde_json::to_string(&daemonset).unwrap()).unwrap();
    let (passed, said) = validate(&broken);
    assert!(!passed && said.contains("hostPIDs"), "{said}");
}

/// `serve` reads its node's pod list for the pods' names: the pod mounts its service
/// account's token, is told its node's name (the downward API), groups by cgroup (the only
/// grouping that names pods), and the account may read pods and nothing else.
#[test]
fn the_service_account_may_read_pods_and_nothing_else_for_the_pods_names() {
    let objects = objects();
    let daemonset = object(&objects, "DaemonSet");
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], true);
    let account = text(pod, "/serviceAccountName");
    let container = &pod["containers"][0];
    let node_name = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "NODE_NAME")
        .expect("NODE_NAME in the container's env");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName",
        "{node_name}"
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.windows(2).any(|w| w == ["--group-by", "cgroup"]),
        "{args:?}"
    );

    let role = object(&objects, "ClusterRole");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]),
        "read pods, nothing else"
    );
    let binding = object(&objects, "ClusterRoleBinding");
    assert_eq!(
        binding["roleRef"],
        serde_json::json!({
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": text(role, "/metadata/name"),
        })
    );
    let namespace = text(object(&objects, "Namespace"), "/metadata/name");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": account, "namespace": namespace}])
    );
    assert_eq!(
        text(object(&objects, "ServiceAccount"), "/metadata/name"),
        account
    );

    // The Operator's own namespace, pod and container target labels (cg-trace's pod) give
    // way to the series' (the pods measured).
    let monitor = object(&objects, "ServiceMonitor");
    for endpoint in monitor["spec"]["endpoints"].as_array().unwrap() {
        let drops = endpoint["relabelings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["action"] == "labeldrop" && r["regex"] == "(namespace|pod|container)");
        assert!(drops, "{endpoint}");
    }
}

/// The port in `--listen ADDR:PORT` among the container's arguments.
fn listen_port(args: &[Value]) -> u64 {
    let at = args
        .iter()
        .position(|a| a == "--listen")
        .expect("--listen in the arguments");
    let addr = args[at + 1].as_str().unwrap();
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn the_daemonset_runs_the_exporter_with_only_the_privileges_it_documents() {
    let objects = objects();
    let daemonset = object(&objects, "DaemonSet");
    let template = &daemonset["spec"]["template"];
    assert!(
        selects(
            &daemonset["spec"]["selector"]["matchLabels"],
            &template["metadata"]["labels"]
        ),
        "the selector must match the pod template's labels"
    );
    let pod = &template["spec"];
    assert_eq!(
        pod["hostPID"], true,
        "pids from the kernel must name /proc entries"
    );
    assert!(pod.get("hostNetwork").is_none() && pod.get("hostIPC").is_none());
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["privileged"], false);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let added: BTreeSet<&str> = security["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(added, BTreeSet::from(["BPF", "PERFMON"]));
    let manifest = fs::read_to_string(deploy_dir().join("kubernetes/cg-trace.yaml")).unwrap();
    for why in [
        "CAP_BPF",
        "CAP_PERFMON",
        "CAP_SYS_ADMIN",
        "hostPID",
        "tracefs",
        "seccomp",
    ] {
        assert!(
            manifest.contains(why),
            "the manifest should say why about {why}"
        );
    }

    // Every mount is a declared volume, read-only; host paths only under /sys.
    let volumes: BTreeMap<&str, &Value> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (text(v, "/name"), v))
        .collect();
    let mounts = container["volumeMounts"].as_array().unwrap();
    for m in mounts {
        let name = text(m, "/name");
        assert!(
            volumes.contains_key(name),
            "mount of undeclared volume {name}"
        );
        assert_eq!(m["readOnly"], true, "{name} must be read-only");
    }
    for (name, v) in &volumes {
        let host = text(v, "/hostPath/path");
        assert!(host.starts_with("/sys/"), "{name}: host path {host}");
    }
    // --powercap-root lies inside a mount of the host's /sys/class.
    let args = container["args"].as_array().unwrap();
    assert_eq!(args[0], "serve");
    let at = args.iter().position(|a| a == "--powercap-root").unwrap();
    let root = args[at + 1].as_str().unwrap();
    assert!(
        mounts.iter().any(|m| {
            let path = text(m, "/mountPath");
            let host = text(volumes[text(m, "/name")], "/hostPath/path");
            root.strip_prefix(path)
                .is_some_and(|rest| format!("{host}{rest}") == "/sys/class/powercap")
        }),
        "--powercap-root {root} is not the host's /sys/class/powercap"
    );
    // Its links (../../devices/virtual/powercap/...) resolve inside the same tree.
    assert!(
        mounts.iter().any(|m| {
            let host = text(volumes[text(m, "/name")], "/hostPath/path");
            let mount_path = text(m, "/mountPath");
            "/sys/devices/virtual/powercap".starts_with(host)
                && mount_path.strip_suffix(&host[4..]) == root.strip_suffix("/class/powercap")
        }),
        "the host's /sys/devices/virtual/powercap is not mounted beside {root}"
    );

    // One port, named, where cg-trace listens, the annotations point and the probes ask.
    let port = &container["ports"][0];
    let number = port["containerPort"].as_u64().unwrap();
    assert_eq!(listen_port(args), number);
    let annotations = string_map(&template["metadata"]["annotations"]);
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], number.to_string());
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    let port_name = text(port, "/name");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(text(&container[probe], "/httpGet/path"), "/healthz");
        assert_eq!(text(&container[probe], "/httpGet/port"), port_name);
    }

    // The Service selects the pods and exposes that port; the ServiceMonitor selects the
    // Service, in its namespace, by the port's name.
    let service = object(&objects, "Service");
    assert!(selects(
        &service["spec"]["selector"],
        &template["metadata"]["labels"]
    ));
    let service_port = &service["spec"]["ports"][0];
    assert_eq!(service_port["targetPort"], port_name);
    assert_eq!(service_port["port"].as_u64(), Some(number));
    let monitor = object(&objects, "ServiceMonitor");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!([text(service, "/metadata/namespace")])
    );
    for endpoint in monitor["spec"]["endpoints"].as_array().unwrap() {
        assert_eq!(endpoint["port"], service_port["name"]);
        assert_eq!(endpoint["path"], "/metrics");
    }
}

/// Metrics `cg-trace serve` exports (cg-agent/src/serve/metrics.rs), with the suffixes the
/// text format gives them: those a dashboard shows (it also exports read errors, lost events,
/// unknown-energy time, group and process counts).
const EXPORTED_METRICS: [&str; 9] = [
    "cg_trace_energy_joules_total",
    "cg_trace_host_energy_joules_total",
    "cg_trace_power_watts",
    "cg_trace_idle_baseline_watts",
    "cg_trace_domain_info",
    "cg_trace_cpu_seconds_total",
    "cg_trace_source_info",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
];

#[test]
fn the_dashboard_queries_exported_metrics_and_defines_its_variables() {
    let dashboard = dashboard();
    assert!(!text(&dashboard, "/uid").is_empty() && !text(&dashboard, "/title").is_empty());
    let variables: BTreeSet<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| text(v, "/name"))
        .collect();
    let builtin = ["__rate_interval", "__range", "__interval"];
    let check_variables = |s: &str, what: &str| {
        for (i, _) in s.match_indices('$') {
            let rest = s[i + 1..].trim_start_matches('{');
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                variables.contains(name.as_str()) || builtin.contains(&name.as_str()),
                "{what}: ${name} is not a dashboard variable"
            );
        }
    };
    let mut ids = BTreeSet::new();
    let mut used = BTreeSet::new();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 5);
    for panel in panels {
        let title = text(panel, "/title");
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: id used twice"
        );
        for key in ["x", "y", "w", "h"] {
            assert!(panel["gridPos"][key].is_u64(), "{title}: gridPos.{key}");
        }
        check_variables(text(panel, "/datasource/uid"), title);
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            let expr = text(target, "/expr");
            check_variables(expr, title);
            assert_eq!(
                expr.matches('(').count(),
                expr.matches(')').count(),
                "{title}: {expr}"
            );
            assert_eq!(
                expr.matches('{').count(),
                expr.matches('}').count(),
                "{expr}"
            );
            // Every metric name it names (cg_*, process_*) is one serve exports.
            for (i, _) in expr.match_indices(|c: char| c.is_ascii_lowercase()) {
                let before = expr[..i].chars().next_back();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                    continue;
                }
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with("cg_") || name.starts_with("process_") {
                    assert!(
                        EXPORTED_METRICS.contains(&name.as_str()),
                        "{title}: {name} is not a metric cg-trace serve exports"
                    );
                    used.insert(name);
                }
            }
        }
    }
    for needed in [
        "cg_trace_energy_joules_total",
        "cg_trace_cpu_seconds_total",
        "cg_trace_power_watts",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ] {
        assert!(used.contains(needed), "no panel shows {needed}");
    }
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = v["definition"].as_str() {
            check_variables(query, "a variable's query");
        }
    }
}

/// The Grafana dashboard (deploy/grafana), parsed.
fn dashboard() -> Value {
    let path = deploy_dir().join("grafana/cg-trace-dashboard.json");
    let json = fs::read_to_string(&path).unwrap();
    // Not a report: the Grafana dashboard.
    serde_json::from_str(&json).unwrap()
}

/// The labels a ServiceMonitor endpoint's relabelings copy the pod's node name into.
fn node_labels(endpoint: &Value) -> BTreeSet<&str> {
    let Some(relabelings) = endpoint["relabelings"].as_array() else {
        return BTreeSet::new();
    };
    relabelings
        .iter()
        .filter(|r| r["sourceLabels"] == serde_json::json!(["__meta_kubernetes_pod_node_name"]))
        // "replace" is the default action, and the whole value ("(.*)" -> "$1") the default.
        .filter(|r| r["action"].as_str().is_none_or(|a| a == "replace"))
        .filter(|r| r.get("regex").is_none() && r.get("replacement").is_none())
        .filter_map(|r| r["targetLabel"].as_str())
        .collect()
}

#[test]
fn the_dashboard_picks_nodes_by_the_label_the_service_monitor_gives_the_node_name() {
    let dashboard = dashboard();
    let picker = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["label"] == "Node")
        .expect("a Node picker among the dashboard's variables");
    let variable = text(picker, "/name");
    // label_values(METRIC{...}, LABEL): the label whose values it lists.
    let query = text(picker, "/definition");
    let label = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .and_then(|q| q.rsplit_once(','))
        .map(|(_, label)| label.trim())
        .unwrap_or_else(|| panic!("not a label_values query: {query}"));
    let objects = objects();
    let monitor = object(&objects, "ServiceMonitor");
    for endpoint in monitor["spec"]["endpoints"].as_array().unwrap() {
        assert!(
            node_labels(endpoint).contains(label),
            "the Node picker lists `{label}`, which the ServiceMonitor does not set to the \
             node's name: {endpoint}"
        );
    }
    // Every panel narrows its queries by that label to the picked nodes.
    let narrowed = format!("{label}=~\"${variable}\"");
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = text(target, "/expr");
            assert!(
                expr.contains(&narrowed),
                "{}: {expr} does not narrow by {narrowed}",
                text(panel, "/title")
            );
        }
    }
}

/// `ARG NAME=VALUE` defaults of a Containerfile.
fn build_args(containerfile: &str) -> BTreeMap<String, String> {
    containerfile
        .lines()
        .filter_map(|l| l.strip_prefix("ARG "))
        .filter_map(|a| a.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// The Containerfile's instructions, continuation lines joined, comments left out.
fn instructions(containerfile: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in containerfile.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

#[test]
fn the_containerfile_installs_the_dist_tarball_where_its_runtime_stage_copies_from() {
    let containerfile = fs::read_to_string(deploy_dir().join("Containerfile")).unwrap();
    let args = build_args(&containerfile);
    assert_eq!(args["VERSION"], env!("CARGO_PKG_VERSION"));
    assert_eq!(args["ARCH"], std::env::consts::ARCH);
    let objects = objects();
    let image = text(
        &object(&objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0],
        "/image",
    );
    assert!(image.ends_with(&format!(":{}", args["VERSION"])), "{image}");

    // The unpack stage's RUN, as a shell script on a tarball dist packs (the debug binary,
    // as the dist test does), with the image's /opt and /tmp under a temporary directory.
    let work = tempfile::tempdir().unwrap();
    let context = work.path().join("context");
    let output = Command::new(bin("xtask"))
        .args(["dist", "--profile", "debug", "--no-build", "--out"])
        .arg(&context)
        .output()
        .expect("running xtask");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let root = work.path().join("image");
    let substitute = |s: &str| {
        let mut s = s
            .replace("${VERSION}", &args["VERSION"])
            .replace("${ARCH}", &args["ARCH"]);
        for absolute in ["/opt/", "/tmp/dist", "/usr/local/"] {
            s = s.replace(absolute, &format!("{}{absolute}", root.display()));
        }
        s
    };
    let steps = instructions(&containerfile);
    let stages: Vec<usize> = (0..steps.len())
        .filter(|&i| steps[i].starts_with("FROM "))
        .collect();
    assert_eq!(stages.len(), 2, "an unpack stage and a runtime stage");
    let (unpack, runtime) = (&steps[stages[0]..stages[1]], &steps[stages[1]..]);
    let mut workdir = root.clone();
    for step in unpack {
        let step = substitute(step);
        if let Some(copy) = step.strip_prefix("COPY ") {
            let words: Vec<&str> = copy.split_whitespace().collect();
            let (sources, dest) = words.split_at(words.len() - 1);
            fs::create_dir_all(dest[0]).unwrap();
            for source in sources {
                fs::copy(context.join(source), Path::new(dest[0]).join(source))
                    .unwrap_or_else(|e| panic!("COPY {source}: {e} (not what dist builds?)"));
            }
        } else if let Some(dir) = step.strip_prefix("WORKDIR ") {
            workdir = PathBuf::from(dir);
        } else if let Some(script) = step.strip_prefix("RUN ") {
            let output = Command::new("sh")
                .args(["-c", script])
                .current_dir(&workdir)
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "RUN {script}:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    // What the runtime stage copies is there, and its entry point is the copied binary.
    let mut copied = Vec::new();
    for step in runtime {
        if let Some(copy) = step.strip_prefix("COPY --from=unpack ") {
            let (source, dest) = copy.split_once(' ').unwrap();
            let source = substitute(source);
            // A file, or a folder whose files are copied (the man pages).
            let source = Path::new(&source);
            assert!(
                source.is_file() || fs::read_dir(source).is_ok_and(|mut d| d.next().is_some()),
                "COPY --from=unpack {}: missing or empty",
                source.display()
            );
            copied.push(dest.trim().to_owned());
        }
    }
    let entrypoint = runtime
        .iter()
        .find_map(|s| s.strip_prefix("ENTRYPOINT "))
        .expect("an ENTRYPOINT");
    // Not a report: the ENTRYPOINT's JSON array.
    let entrypoint: Vec<String> = serde_json::from_str(entrypoint).unwrap();
    assert!(
        copied.contains(&entrypoint[0]),
        "{entrypoint:?} is not copied: {copied:?}"
    );
}
