//! `cg-trace serve`: the long-running exporter. Traces the whole machine (the `--all`
//! session, fed interval by interval to [`model::Exporter`]) until SIGINT or SIGTERM, and
//! serves `/metrics` (Prometheus text, or OpenMetrics when the scraper asks for it) and
//! `/healthz` over HTTP ([`http`]: hyper on a tokio runtime, on a thread of its own). In a
//! Kubernetes pod, series of pods get their namespace, pod and container names ([`kube`]).

pub mod churn;
pub mod http;
pub mod kube;
pub mod metrics;
pub mod model;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::{
    functions::FunctionOptions,
    privileges::Invoker,
    session::{
        self, IdleWatts, Mode, Notices, RunConfig,
        live::{LiveEvent, LiveHooks},
    },
    sources::SourceOptions,
};

use self::{
    http::{Request, Response},
    metrics::OwnCost,
    model::{Exporter, ServeOptions},
};

/// The options of `cg-trace serve` (besides the source options).
#[derive(Clone, Debug, PartialEq)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub interval: Duration,
    pub duration: Option<Duration>,
    pub options: ServeOptions,
    /// `--kube-pods-url` (none: the in-cluster API server, when in a cluster).
    pub kube_pods_url: Option<kube::PodsUrl>,
    /// `--kube-credentials`: the service account's `token` and `ca.crt`.
    pub kube_credentials: std::path::PathBuf,
}

/// What the measuring thread and the server share.
#[derive(Debug, Default)]
pub struct Shared {
    exporter: Option<Exporter>,
    last_sample: Option<Instant>,
    /// This node's pods' names, when read (in a Kubernetes pod, `--group-by cgroup`).
    pods: Option<Arc<kube::PodCache>>,
}

/// `/healthz` says unhealthy when no interval was measured for this many intervals (and at
/// least [`MIN_STALE`]).
const STALE_INTERVALS: u32 = 10;
const MIN_STALE: Duration = Duration::from_secs(5);

/// Whether the scraper asked for OpenMetrics.
fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// Answers one request from the shared state (`now` and `interval` decide staleness).
pub fn respond(request: &Request, shared: &Mutex<Shared>, interval: Duration) -> Response {
    if request.method != "GET" && request.method != "HEAD" {
        return Response::text(405, "only GET and HEAD\n");
    }
    match request.path.as_str() {
        "/metrics" => {
            let (scrape, pods) = match shared.lock() {
                Ok(state) => (
                    state.exporter.as_ref().map(Exporter::scrape),
                    state.pods.clone(),
                ),
                Err(_) => (None, None),
            };
            let Some(scrape) = scrape else {
                return Response::text(503, "starting: no interval measured yet\n");
            };
            let body = named_openmetrics(&scrape, OwnCost::now(), pods.as_deref());
            if wants_openmetrics(request.accept.as_deref()) {
                Response {
                    status: 200,
                    content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    body,
                }
            } else {
                Response {
                    status: 200,
                    content_type: "text/plain; version=0.0.4; charset=utf-8",
                    body: metrics::prometheus_text(&body),
                }
            }
        }
        "/healthz" => {
            let last = shared.lock().ok().and_then(|s| s.last_sample);
            let stale = (interval * STALE_INTERVALS).max(MIN_STALE);
            match last {
                Some(at) if at.elapsed() <= stale => Response::text(200, "ok\n"),
                Some(at) => Response::text(
                    503,
                    format!(
                        "no interval measured for {:.1} s\n",
                        at.elapsed().as_secs_f64()
                    ),
                ),
                None => Response::text(503, "starting: no interval measured yet\n"),
            }
        }
        "/" => Response::text(200, "cg-trace exporter: /metrics, /healthz\n"),
        _ => Response::text(404, "not found: /metrics, /healthz\n"),
    }
}

/// The scrape in the OpenMetrics text format, pods' groups named as `pods` knows them; a
/// group of a pod or container it does not know asks it to read the list again (once).
fn named_openmetrics(
    scrape: &model::Scrape,
    own: OwnCost,
    pods: Option<&kube::PodCache>,
) -> String {
    let Some(cache) = pods else {
        return metrics::openmetrics(scrape, own);
    };
    cache
        .with_names(|names| {
            for key in &scrape.labels {
                if let Some(uid) = key.pod_uid.as_deref()
                    && names.lacks(uid, key.container_id.as_deref())
                {
                    cache.ask_refresh(uid, key.container_id.as_deref());
                }
            }
            metrics::openmetrics_named(scrape, own, Some(names))
        })
        .unwrap_or_else(|| metrics::openmetrics(scrape, own))
}

/// Runs the exporter; returns the exit code (2: cannot listen or cannot trace).
pub fn main(
    config: &ServeConfig,
    sources: SourceOptions,
    invoker: &Invoker,
    notices: Notices,
) -> i32 {
    // Privileges first: nothing is served by a run that cannot trace.
    if let Err(message) = crate::privileges::check_can_trace() {
        eprintln!("cg-trace: {message}");
        return 2;
    }
    let (listener, address) = match listen(config.listen) {
        Ok(bound) => bound,
        Err(code) => return code,
    };
    let kube = kube_names(config);
    let shared = Arc::new(Mutex::new(Shared {
        pods: kube.as_ref().map(|(_, cache)| cache.clone()),
        ..Shared::default()
    }));
    let stop_server = Arc::new(tokio::sync::Notify::new());
    let server = Server {
        listener,
        address,
        shared: shared.clone(),
        kube,
        // Pods no longer listed keep their names while their groups keep series, and a while.
        retain: Duration::from_nanos(config.options.grace_ns) + 2 * kube::REFRESH,
        stop: stop_server.clone(),
        interval: config.interval,
    };
    let server = match server.spawn() {
        Ok(s) => s,
        Err(err) => {
            eprintln!("cg-trace: cannot start the HTTP server: {err}");
            return 1;
        }
    };
    eprintln!("cg-trace: serving metrics on http://{address}/metrics (Ctrl-C or SIGTERM stops)");
    let hooks = exporter_hooks(shared, config.options);
    let outcome = session::run_live(run_config(config, sources, invoker, notices), hooks);
    stop_server.notify_one();
    let _ = server.join();
    match outcome {
        Ok(outcome) => {
            eprintln!(
                "cg-trace: stopped ({}) after {:.1} s",
                outcome.recording.stop_reason,
                outcome.recording.duration_ns as f64 / 1e9
            );
            0
        }
        Err(err) => {
            eprintln!("cg-trace: {err}");
            err.exit_code()
        }
    }
}

/// Binds the address before anything is traced, so that a taken port is a clear error:
/// the listener (non-blocking) and the address it got, or the exit code (2).
fn listen(wanted: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr), i32> {
    let listener = match std::net::TcpListener::bind(wanted) {
        Ok(l) => l,
        Err(err) => {
            eprintln!(
                "cg-trace: cannot listen on {wanted}: {err}; choose another address with --listen"
            );
            return Err(2);
        }
    };
    let address = listener.local_addr().unwrap_or(wanted);
    // Room for a full connection budget beside the probes' and sources' descriptors.
    session::functions::raise_open_files_limit(http::MAX_CONNECTIONS + 512);
    if let Err(err) = listener.set_nonblocking(true) {
        eprintln!("cg-trace: cannot listen on {address}: {err}");
        return Err(2);
    }
    if !address.ip().is_loopback() {
        eprintln!(
            "cg-trace: warning: serving on {address}, not a loopback address: anyone who can \
             reach it can read this machine's per-process energy"
        );
    }
    Ok((listener, address))
}

/// The session `serve` runs: the whole machine, interval after interval, in bounded memory.
fn run_config(
    config: &ServeConfig,
    sources: SourceOptions,
    invoker: &Invoker,
    notices: Notices,
) -> RunConfig {
    RunConfig {
        mode: Mode::System,
        interval: config.interval,
        duration: config.duration,
        sources,
        idle_watts: IdleWatts::Estimate,
        calibration: Duration::ZERO,
        timeseries: false,
        proc_root: "/proc".into(),
        noop_probes: false,
        accounting: None,
        functions: FunctionOptions::default(),
        invoker: invoker.clone(),
        command_stdout_to_stderr: false,
        notices,
        bounded_memory: true,
    }
}

/// What the HTTP server's thread needs: it answers from `shared` until `stop` is notified.
struct Server {
    listener: std::net::TcpListener,
    address: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    kube: Option<(kube::KubeConfig, Arc<kube::PodCache>)>,
    /// How long pods no longer listed keep their names.
    retain: Duration,
    stop: Arc<tokio::sync::Notify>,
    interval: Duration,
}

impl Server {
    /// Starts the server on a thread of its own (hyper on a current-thread tokio runtime).
    fn spawn(self) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("cg-trace-http".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(err) => {
                        eprintln!("cg-trace: cannot start the HTTP server: {err}");
                        return;
                    }
                };
                runtime.block_on(self.serve());
            })
    }

    async fn serve(self) {
        let Server {
            listener,
            address,
            shared,
            kube,
            retain,
            stop,
            interval,
        } = self;
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(err) => {
                eprintln!("cg-trace: cannot serve on {address}: {err}");
                return;
            }
        };
        if let Some((kube, cache)) = kube {
            tokio::spawn(kube::keep_fresh(kube, cache, retain));
        }
        let handler: http::Handler =
            Arc::new(move |request: &Request| respond(request, &shared, interval));
        http::serve(listener, handler, stop).await;
    }
}

/// The session's hooks: each interval measured goes to the shared exporter (made when the
/// session starts), and marks the time of the last sample for `/healthz`.
fn exporter_hooks(shared: Arc<Mutex<Shared>>, options: ServeOptions) -> LiveHooks {
    LiveHooks {
        observer: Box::new(move |event| {
            let Ok(mut state) = shared.lock() else {
                return;
            };
            match event {
                LiveEvent::Started(start) => {
                    state.exporter = Some(Exporter::with_grouper(
                        &start,
                        options,
                        model::grouper(options.group_by, "/proc".into()),
                    ));
                }
                LiveEvent::Sample(sample) => {
                    if let Some(exporter) = state.exporter.as_mut() {
                        exporter.add(&sample);
                    }
                    state.last_sample = Some(Instant::now());
                }
            }
        }),
        stop: Arc::new(tokio::sync::Notify::new()),
        command_output: None,
    }
}

/// Where this node's pod names come from, and their cache: only with `--group-by cgroup`
/// (the only grouping whose series name pods), in a cluster or with `--kube-pods-url`.
fn kube_names(config: &ServeConfig) -> Option<(kube::KubeConfig, Arc<kube::PodCache>)> {
    if config.options.group_by != model::GroupBy::Cgroup {
        if let Some(kube::PodsUrl::Url(url)) = &config.kube_pods_url {
            crate::console::warn(format_args!(
                "--kube-pods-url {url} is not read: only --group-by cgroup names pods"
            ));
        }
        return None;
    }
    let env = |name: &str| std::env::var(name).ok();
    match kube::config(
        config.kube_pods_url.clone(),
        config.kube_credentials.clone(),
        &env,
    ) {
        Ok(Some(kube)) => {
            crate::console::say(format_args!(
                "namespace, pod and container labels from {} (every {} s)",
                kube.url,
                kube::REFRESH.as_secs()
            ));
            Some((kube, Arc::new(kube::PodCache::default())))
        }
        Ok(None) => None,
        Err(note) => {
            crate::console::warn(note);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str, accept: Option<&str>) -> Request {
        Request {
            method: "GET".into(),
            path: path.into(),
            accept: accept.map(str::to_string),
        }
    }

    fn scrape() -> model::Scrape {
        model::Scrape {
            domains: vec![model::DomainRow {
                name: "package-0".into(),
                kind: "package".into(),
                provenance: crate::sources::Provenance::Measured,
                top_level: true,
                host_j: 10.0,
                power_w: 5.0,
                idle_baseline_w: 1.0,
                idle_method: "regression",
                unknown_s: 0.0,
            }],
            energy: vec![
                (0, "say \"hi\"\n".into(), 6.0),
                (0, model::IDLE.into(), 3.0),
                (0, model::OTHER.into(), 1.0),
                (0, model::EXITED.into(), 0.0),
            ],
            cpu: vec![("say \"hi\"\n".into(), 1.5)],
            sources: vec![model::SourceRow {
                name: "powercap".into(),
                provenance: crate::sources::Provenance::Measured,
                quality: "ok",
            }],
            ..model::Scrape::default()
        }
    }

    #[test]
    fn metrics_come_as_openmetrics_on_request_and_as_prometheus_text_otherwise() {
        let om = metrics::openmetrics(&scrape(), OwnCost::default());
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(
            om.contains("# TYPE cg_trace_energy_joules counter\n"),
            "{om}"
        );
        // Label values are escaped.
        assert!(
            om.contains(
                "cg_trace_energy_joules_total{domain=\"package-0\",group=\"say \\\"hi\\\"\\n\"} 6.0"
            ),
            "{om}"
        );
        let text = metrics::prometheus_text(&om);
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE cg_trace_energy_joules_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE cg_trace_power_watts gauge\n"),
            "{text}"
        );
        assert!(text.contains(
            "cg_trace_source_info{source=\"powercap\",provenance=\"measured\",quality=\"ok\"} 1"
        ));
        // The build, as exporters say theirs: version and commit (hexadecimal, or "unknown").
        let build = format!(
            "cg_trace_build_info{{version=\"{}\",commit=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION"),
            env!("CG_TRACE_GIT_COMMIT")
        );
        assert!(text.contains(&build), "{text}");
        let commit = env!("CG_TRACE_GIT_COMMIT");
        assert!(
            commit == "unknown"
                || (!commit.is_empty() && commit.chars().all(|c| c.is_ascii_hexdigit())),
            "{commit}"
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok_and(f64::is_finite), "{line}");
        }
    }

    #[test]
    fn answers_health_metrics_and_unknown_paths() {
        let shared = Mutex::new(Shared::default());
        let interval = Duration::from_millis(100);
        assert_eq!(
            respond(&get("/healthz", None), &shared, interval).status,
            503
        );
        assert_eq!(
            respond(&get("/metrics", None), &shared, interval).status,
            503
        );
        shared.lock().unwrap().last_sample = Some(Instant::now());
        assert_eq!(
            respond(&get("/healthz", None), &shared, interval).status,
            200
        );
        shared.lock().unwrap().last_sample = Some(Instant::now() - Duration::from_secs(60));
        let stale = respond(&get("/healthz", None), &shared, interval);
        assert_eq!(stale.status, 503);
        assert!(
            stale.body.contains("no interval measured for"),
            "{}",
            stale.body
        );
        assert_eq!(respond(&get("/nope", None), &shared, interval).status, 404);
        let post = Request {
            method: "POST".into(),
            ..get("/metrics", None)
        };
        assert_eq!(respond(&post, &shared, interval).status, 405);
    }

    /// Whether `cache` was asked to read the pod list again (a permit is waiting).
    fn refresh_asked(cache: &kube::PodCache) -> bool {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::select! {
                biased;
                () = cache.refresh.notified() => true,
                () = std::future::ready(()) => false,
            }
        })
    }

    #[test]
    fn a_pod_s_series_get_its_names_and_an_unknown_pod_asks_for_the_list_again_once() {
        use kube::pods::tests::{CONTAINER_ID, POD_UID, fixture};
        let group = format!("containerd:{}", &CONTAINER_ID[..12]);
        let scrape = model::Scrape {
            energy: vec![(0, group.clone(), 2.0)],
            labels: vec![model::GroupKey {
                name: group,
                container_id: Some(CONTAINER_ID.into()),
                pod_uid: Some(POD_UID.into()),
                systemd_unit: None,
            }],
            ..scrape()
        };
        let cache = kube::PodCache::default();
        // No list read yet: the ids alone, and a read asked for.
        let text = named_openmetrics(&scrape, OwnCost::default(), Some(&cache));
        assert!(text.contains(&format!("pod_uid=\"{POD_UID}\"")), "{text}");
        assert!(!text.contains("namespace="), "{text}");
        assert!(refresh_asked(&cache));
        // Once: a cgroup no list names (a sandbox) does not have the list read again and again.
        named_openmetrics(&scrape, OwnCost::default(), Some(&cache));
        assert!(!refresh_asked(&cache));
        let pods = kube::pods::parse(fixture().as_bytes()).unwrap();
        cache.update(pods, Instant::now(), Duration::from_secs(60));
        let text = named_openmetrics(&scrape, OwnCost::default(), Some(&cache));
        assert!(
            text.contains(&format!(
                "cg_trace_energy_joules_total{{domain=\"package-0\",group=\"containerd:{}\",\
                 container_id=\"{CONTAINER_ID}\",pod_uid=\"{POD_UID}\",namespace=\"shop\",\
                 pod=\"web-6d4cf56db6-8xk2p\",container=\"nginx\"}} 2.0",
                &CONTAINER_ID[..12]
            )),
            "{text}"
        );
        assert!(!refresh_asked(&cache), "all known: nothing to ask");
        // Outside a cluster: no names.
        assert!(!named_openmetrics(&scrape, OwnCost::default(), None).contains("namespace="));
    }

    #[test]
    fn openmetrics_is_chosen_by_the_accept_header() {
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        )));
        assert!(!wants_openmetrics(Some("text/plain")));
        assert!(!wants_openmetrics(None));
    }
}
