//! End-to-end tests of `cg-trace serve`: a real Prometheus server scrapes it while a known
//! workload runs, and its HTTP API says what it stored; the exporter's HTTP side (health,
//! loopback by default, malformed and oversized requests, a client that never sends its
//! request, 600 slow clients beside a real Prometheus) and its shutdown on SIGTERM.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use cg_tests::{Background, FakePowercap, Linear, bin, require_root};
use serde_json::Value;

/// A free loopback port (bound, then released for the program to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `cg-trace serve`, stopped (SIGTERM) and reaped when dropped.
struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Serve {
    fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// [`Serve::start`] with these environment variables too.
    fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let listen = addr.to_string();
        let mut all = vec!["serve", "--listen", &listen];
        all.extend_from_slice(args);
        Self::start_as_given_with_env(&all, addr, env)
    }

    fn start_as_given(args: &[&str], addr: SocketAddr) -> Self {
        Self::start_as_given_with_env(args, addr, &[])
    }

    fn start_as_given_with_env(args: &[&str], addr: SocketAddr, env: &[(&str, &str)]) -> Self {
        let child = Command::new(bin("cg-trace"))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting cg-trace serve");
        let mut serve = Serve { child, addr };
        serve.wait_healthy();
        serve
    }

    /// Waits (generously: the machine is shared) until /healthz says ok.
    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut stderr = String::new();
                let _ = self
                    .child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut stderr);
                panic!("cg-trace serve exited ({status}) before serving: {stderr}");
            }
            if let Ok((200, _, _)) = http_get(self.addr, "/healthz", None) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cg-trace serve never became healthy"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Sends SIGTERM; returns the exit status and what it said on stderr.
    fn terminate(mut self) -> (Option<i32>, String) {
        // SAFETY: kill on the pid of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = wait_for(&mut self.child, Duration::from_secs(60));
        let mut stderr = String::new();
        let _ = self
            .child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr);
        (status, stderr)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill on the pid of our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            if wait_for(&mut self.child, Duration::from_secs(20)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// Waits for `child` to exit, at most `limit`; its exit code.
fn wait_for(child: &mut Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// One HTTP/1.1 GET: `(status, head, body)`.
fn http_get(
    addr: SocketAddr,
    target: &str,
    accept: Option<&str>,
) -> std::io::Result<(u16, String, String)> {
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    raw_request(
        addr,
        format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n")
            .as_bytes(),
    )
}

fn raw_request(addr: SocketAddr, request: &[u8]) -> std::io::Result<(u16, String, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(request)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server with a temporary configuration and data directory, scraping
/// `target` every second; killed when dropped.
struct Prometheus {
    _dir: tempfile::TempDir,
    child: Child,
    addr: SocketAddr,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
                 - job_name: cg\n    scrape_interval: 1s\n    scrape_timeout: 1s\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let program = ["/usr/bin/prometheus", "/usr/sbin/prometheus"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect(
                "prometheus is not installed: `cargo xtask setup` installs it (apt: prometheus)",
            );
        let child = Command::new(program)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting prometheus");
        let mut prometheus = Prometheus {
            _dir: dir,
            child,
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                panic!("prometheus exited at once ({status})");
            }
            if let Ok((200, _, _)) = http_get(addr, "/-/ready", None) {
                break;
            }
            assert!(Instant::now() < deadline, "prometheus never became ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        prometheus
    }

    /// An instant query's result vector.
    fn query(&self, promql: &str) -> Vec<Value> {
        self.try_query(promql)
            .unwrap_or_else(|err| panic!("{promql}: {err}"))
    }

    /// An instant query's result vector, or what went wrong (a Prometheus that has just
    /// started may drop a query).
    fn try_query(&self, promql: &str) -> Result<Vec<Value>, String> {
        let (status, _, body) = http_get(
            self.addr,
            &format!("/api/v1/query?query={}", encode(promql)),
            None,
        )
        .map_err(|err| format!("querying prometheus: {err}"))?;
        if status != 200 {
            return Err(format!("status {status}: {body}"));
        }
        // Not a report: Prometheus's HTTP API answer.
        let answer: Value = serde_json::from_str(&body).map_err(|err| format!("{err}: {body}"))?;
        if answer["status"] != "success" {
            return Err(body);
        }
        Ok(answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// An instant query's result once it has one: a scrape that missed its 1 s timeout (a
    /// debug build on a busy machine) marks every series stale until the next one, and an
    /// instant query then finds nothing (a fresh clone's CI met it once).
    fn query_present(&self, promql: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let result = self.query(promql);
            if !result.is_empty() || Instant::now() > deadline {
                return result;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// A query whose result is one number.
    fn number(&self, promql: &str) -> f64 {
        let result = self.query_present(promql);
        assert_eq!(result.len(), 1, "{promql}: {result:?}");
        result[0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{promql}: {result:?}"))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Real Prometheus, real eBPF, a generated RAPL powercap tree and a known workload
/// (two `cg-spin`, niced up so that the other builds on a shared machine do not outrun them): the
/// series stored add up to the host's measured total, and the workload's group has the
/// largest share of the energy.
#[test]
fn prometheus_scrapes_serve_and_the_series_add_up_to_the_host_total() {
    require_root();
    let rapl = FakePowercap::start(
        Linear {
            idle_w: 6.0,
            k_w_per_cpu: 9.0,
        },
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 7.0,
        },
        Linear {
            idle_w: 1.5,
            k_w_per_cpu: 0.5,
        },
        20_000_000_000,
    );
    let root = rapl.root().display().to_string();
    let serve = Serve::start(&[
        "--powercap-root",
        &root,
        "--source",
        "powercap",
        "--interval",
        "200",
        "--top",
        "10",
    ]);
    let prometheus = Prometheus::start(serve.addr);
    // Two spinning processes (the machine has 2 CPUs or more; builds may load it), niced up:
    // each in a session of its own (with autogroups, nice weighs only within a session) whose
    // autogroup is niced up too.
    let spin = |_| {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new("nice");
        command
            .args(["-n", "-15"])
            .arg(bin("cg-spin"))
            .arg("0")
            .stdout(Stdio::null());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let child = Background(command.spawn().expect("spawning cg-spin"));
        // Absent without CONFIG_SCHED_AUTOGROUP: then nice alone decides.
        let _ = std::fs::write(format!("/proc/{}/autogroup", child.pid()), "-15");
        child
    };
    let spinners: Vec<Background> = (0..2).map(spin).collect();
    // Until Prometheus has scraped the target a few times with the workload running.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let scrapes = prometheus.query(r#"count_over_time(up{job="cg"}[1m])"#);
        let up = prometheus.query(r#"up{job="cg"}"#);
        let done = scrapes
            .first()
            .and_then(|r| r["value"][1].as_str()?.parse::<f64>().ok())
            .is_some_and(|n| n >= 12.0);
        if done && up.first().is_some_and(|r| r["value"][1] == "1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus did not scrape: {up:?}"
        );
    }
    // Each ratio is evaluated at one instant, over the samples of one scrape.
    let top = r#"domain=~"package-0|dram-0""#;
    let ratio = prometheus.number(&format!(
        "sum(cg_trace_energy_joules_total{{{top}}}) / sum(cg_trace_host_energy_joules_total{{{top}}})"
    ));
    assert!((ratio - 1.0).abs() <= 0.01, "series / host total = {ratio}");
    let host = prometheus.number(&format!("sum(cg_trace_host_energy_joules_total{{{top}}})"));
    assert!(host > 0.0, "host total {host} J");
    // Per domain too, core-0 inside package-0 included.
    for domain in ["package-0", "core-0", "dram-0"] {
        let ratio = prometheus.number(&format!(
            r#"sum(cg_trace_energy_joules_total{{domain="{domain}"}}) / sum(cg_trace_host_energy_joules_total{{domain="{domain}"}})"#
        ));
        assert!(
            (ratio - 1.0).abs() <= 0.01,
            "{domain}: series / host total = {ratio}"
        );
    }
    // The workload's group: a positive rate, the largest share of the energy of any group.
    let rates = prometheus.query_present(
        r#"sort_desc(rate(cg_trace_energy_joules_total{domain="package-0",group!~"idle|other|exited"}[8s]))"#,
    );
    let first = rates.first().expect("no group rates");
    assert_eq!(first["metric"]["group"], "cg-spin", "{rates:?}");
    let rate: f64 = first["value"][1].as_str().unwrap().parse().unwrap();
    assert!(rate > 0.0, "{rates:?}");
    let sources = prometheus.query_present("cg_trace_source_info");
    assert_eq!(
        sources[0]["metric"]["provenance"], "measured",
        "{sources:?}"
    );
    drop(spinners);
    drop(prometheus);
    let (code, stderr) = serve.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}

/// Slow clients, as an attacker holds them: `count` connections to `target`, each sending one
/// byte of a request head that never ends every 2 s; one the server answers or closes is
/// opened again at once. They run on a thread of their own until dropped (or for 120 s at
/// most).
struct SlowClients {
    stop: Arc<AtomicBool>,
    /// Rounds done, and in how many of them all `count` connections were open at the end.
    rounds: Arc<(AtomicUsize, AtomicUsize)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How many slow clients: more than serve's connection budget (512), as an attacker would.
const SLOW: usize = 600;

/// Connections held at once that still outnumber serve's places (512) by a margin.
const PRESSING: usize = 560;

/// What a slow client trickles: a request head that never ends.
const SLOW_HEAD: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";

impl SlowClients {
    fn start(target: SocketAddr, count: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let thread = {
            let (stop, rounds) = (stop.clone(), rounds.clone());
            std::thread::spawn(move || {
                let mut clients: Vec<Option<(TcpStream, usize)>> =
                    (0..count).map(|_| None).collect();
                let deadline = Instant::now() + Duration::from_secs(120);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let round = Instant::now();
                    for client in &mut clients {
                        *client = Self::trickle(client.take(), target);
                    }
                    rounds.0.fetch_add(1, Ordering::Relaxed);
                    // A round presses when more connections were held than serve has places
                    // for; on a loaded machine a few connects of a round may time out.
                    if clients.iter().filter(|c| c.is_some()).count() >= PRESSING {
                        rounds.1.fetch_add(1, Ordering::Relaxed);
                    }
                    while round.elapsed() < Duration::from_secs(2) && !stop.load(Ordering::Relaxed)
                    {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            })
        };
        SlowClients {
            stop,
            rounds,
            thread: Some(thread),
        }
    }

    /// One byte more on `client`, or on a new connection when the server answered or closed
    /// it; `None` when no connection could be made.
    fn trickle(
        client: Option<(TcpStream, usize)>,
        target: SocketAddr,
    ) -> Option<(TcpStream, usize)> {
        let open = client.filter(|(stream, _)| {
            let mut byte = [0u8; 1];
            // Still open and silent: nothing to read yet.
            matches!(stream.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        });
        if let Some(sent) = open.and_then(Self::send_one) {
            return Some(sent);
        }
        let stream = TcpStream::connect_timeout(&target, Duration::from_secs(1)).ok()?;
        stream.set_nonblocking(true).ok()?;
        Self::send_one((stream, 0))
    }

    /// Sends the next byte of [`SLOW_HEAD`] (then `a`s); `None` when the connection failed.
    fn send_one((mut stream, sent): (TcpStream, usize)) -> Option<(TcpStream, usize)> {
        let byte = SLOW_HEAD.get(sent).copied().unwrap_or(b'a');
        match stream.write(&[byte]) {
            Ok(1) => Some((stream, sent + 1)),
            _ => None,
        }
    }

    /// `(rounds, rounds that ended with at least [`PRESSING`] connections open)`.
    fn rounds(&self) -> (usize, usize) {
        (
            self.rounds.0.load(Ordering::Relaxed),
            self.rounds.1.load(Ordering::Relaxed),
        )
    }
}

impl Drop for SlowClients {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Issue 20 item 3: 600 slow clients held against serve (each sending a byte every 2 s and
/// never finishing its request; more than its 512 places) do not keep a real Prometheus,
/// scraping every second, from its scrapes: at least 99 % of them succeed (the hand-written
/// server with 32 places answered 81-92 % of them 503).
#[test]
fn prometheus_scrapes_serve_while_600_slow_clients_are_held() {
    require_root();
    let serve = Serve::start(&["--source", "model", "--interval", "1000"]);
    let prometheus = Prometheus::start(serve.addr);
    let deadline = Instant::now() + Duration::from_secs(60);
    // A query may fail while Prometheus is starting: asked again.
    let scraped = |p: &Prometheus| {
        p.try_query(r#"up{job="cg"} == 1"#)
            .is_ok_and(|up| !up.is_empty())
    };
    while !scraped(&prometheus) {
        assert!(Instant::now() < deadline, "prometheus never scraped serve");
        std::thread::sleep(Duration::from_millis(500));
    }
    let slow = SlowClients::start(serve.addr, SLOW);
    // The slow clients first hold their connections (one round), then 25 s of scrapes under
    // them are counted.
    let deadline = Instant::now() + Duration::from_secs(60);
    while slow.rounds().1 == 0 {
        assert!(
            Instant::now() < deadline,
            "{SLOW} slow connections never opened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(25));
    let scrapes = prometheus.number(r#"count_over_time(up{job="cg"}[25s])"#);
    let succeeded = prometheus.number(r#"sum_over_time(up{job="cg"}[25s])"#);
    let rss_mb =
        prometheus.number(r#"max_over_time(process_resident_memory_bytes{job="cg"}[25s])"#) / 1e6;
    let (rounds, full_rounds) = slow.rounds();
    drop(slow);
    eprintln!(
        "{succeeded} of {scrapes} scrapes succeeded under {SLOW} slow clients ({full_rounds} of \
         {rounds} rounds held at least {PRESSING}); serve's RSS at most {rss_mb:.1} MB"
    );
    // The clients kept up their pressure while the scrapes were counted.
    assert!(
        full_rounds * 10 >= rounds * 8,
        "only {full_rounds} of {rounds} rounds held at least {PRESSING} connections"
    );
    assert!(scrapes >= 15.0, "only {scrapes} scrapes in 25 s");
    assert!(
        succeeded >= 0.99 * scrapes,
        "{succeeded} of {scrapes} scrapes succeeded"
    );
    // Serving goes on afterwards, and SIGTERM still stops it.
    let (status, _, _) = http_get(serve.addr, "/healthz", None).unwrap();
    assert_eq!(status, 200);
    drop(prometheus);
    let (code, stderr) = serve.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}

/// /healthz and /metrics in the Prometheus text format when OpenMetrics is not asked for;
/// a request head larger than the bound and a malformed one are refused, while a client
/// that never sends its request holds only its own connection; SIGTERM stops it (exit 0).
#[test]
fn serve_answers_health_refuses_bad_requests_and_stops_on_sigterm() {
    require_root();
    let serve = Serve::start(&["--source", "model", "--interval", "100"]);
    let (status, _, body) = http_get(serve.addr, "/healthz", None).unwrap();
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    // A client that connects and says nothing, held open during the rest.
    let _silent = TcpStream::connect(serve.addr).unwrap();
    let (status, head, body) = http_get(serve.addr, "/metrics", None).unwrap();
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(
        body.contains("# TYPE cg_trace_energy_joules_total counter\n"),
        "{body}"
    );
    assert!(body.contains("cg_trace_energy_joules_total{domain=\"model\",group=\"idle\"}"));
    assert!(body.contains("process_resident_memory_bytes "), "{body}");
    // The build it says is the one `cg-trace --version` names.
    let version = Command::new(bin("cg-trace"))
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let commit = version
        .lines()
        .find_map(|l| l.strip_prefix("commit: "))
        .unwrap_or_else(|| panic!("no commit in --version: {version}"));
    let build = format!(
        "cg_trace_build_info{{version=\"{}\",commit=\"{commit}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(body.contains(&build), "{build} missing from {body}");
    // Prometheus's own checker (and linter) accepts the text form.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (from the prometheus package) runs");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let (status, head, body) = http_get(
        serve.addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0"),
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"));
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(100_000)
    );
    let (status, _, _) = raw_request(serve.addr, huge.as_bytes()).unwrap();
    assert_eq!(status, 431);
    let (status, _, _) = raw_request(serve.addr, b"\x00\x01garbage\r\n\r\n").unwrap();
    assert_eq!(status, 400);
    let (status, _, _) = http_get(serve.addr, "/nothing-here", None).unwrap();
    assert_eq!(status, 404);
    let (status, _, _) = http_get(serve.addr, "/healthz", None).unwrap();
    assert_eq!(status, 200);
    let (code, stderr) = serve.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("stopped (interrupted by SIGTERM)"),
        "{stderr}"
    );
}

/// Without --listen it serves on 127.0.0.1:9464 only (the socket is bound to loopback).
#[test]
fn serve_listens_on_loopback_by_default() {
    require_root();
    let addr: SocketAddr = "127.0.0.1:9464".parse().unwrap();
    let serve = Serve::start_as_given(&["serve", "--source", "model"], addr);
    let pid = serve.child.id();
    let listening = Command::new("ss")
        .args(["-Hltnp"])
        .output()
        .expect("running ss");
    let listening = String::from_utf8_lossy(&listening.stdout).into_owned();
    let ours: Vec<&str> = listening
        .lines()
        .filter(|l| l.contains(&format!("pid={pid},")))
        .collect();
    assert_eq!(ours.len(), 1, "{listening}");
    assert!(ours[0].contains(" 127.0.0.1:9464 "), "{}", ours[0]);
    let (code, stderr) = serve.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}

/// An address already in use is bad input: exit 2 before anything is traced.
#[test]
fn serve_refuses_an_address_in_use() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = Command::new(bin("cg-trace"))
        .args(["serve", "--source", "model", "--listen", &addr])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");
    assert!(stderr.contains("--listen"), "{stderr}");
}

/// `--group-by cgroup` on this machine's cgroup v2 hierarchy: a workload in a cgroup shaped
/// like a docker container's is exported as that container's group, labelled with its id.
#[test]
fn serve_groups_a_container_shaped_cgroup_by_its_container_id() {
    serve_exports_a_docker_shaped_workload(Moved::BeforeServeStarts);
}

/// A container runtime forks, moves the child into the container's cgroup, then execs the
/// entrypoint. Here `serve` sees the child first in the test's own cgroup (it starts after
/// serve), and the move comes a second later, just before the exec: the exec puts the process
/// in the container's group (the process table reads the cgroup again at exec).
#[test]
fn serve_moves_a_process_into_the_container_it_execs_in() {
    serve_exports_a_docker_shaped_workload(Moved::BetweenForkAndExec);
}

enum Moved {
    BeforeServeStarts,
    BetweenForkAndExec,
}

fn serve_exports_a_docker_shaped_workload(moved: Moved) {
    require_root();
    let unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.join("cgroup.procs").exists() && !p.join("cpu").is_dir())
        .expect("a cgroup v2 hierarchy");
    let salt = match moved {
        Moved::BeforeServeStarts => 0x9e37_79b9_7f4a_7c15,
        Moved::BetweenForkAndExec => 0x7f4a_7c15_9e37_79b9,
    };
    let id = format!("{:064x}", u128::from(std::process::id()) * salt);
    let id = &id[id.len() - 64..];
    let slice = unified.join(format!("cg-trace-test-{}.slice", std::process::id()));
    let scope = slice.join(format!("docker-{id}.scope"));
    std::fs::create_dir_all(&scope).expect("creating a cgroup");
    struct Remove(std::path::PathBuf, std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
            let _ = std::fs::remove_dir(&self.1);
        }
    }
    let _remove = Remove(scope.clone(), slice.clone());
    let options = [
        "--source",
        "model",
        "--interval",
        "100",
        "--group-by",
        "cgroup",
    ];
    // A shell waiting for a line, moved into the cgroup, then told to become the workload.
    let spawn_shell = || {
        Command::new("sh")
            .arg("-c")
            .arg(format!("read go; exec {} 0", bin("cg-spin").display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let move_into_scope =
        |pid: u32| std::fs::write(scope.join("cgroup.procs"), pid.to_string()).expect("moving it");
    let (serve, mut shell) = match moved {
        Moved::BeforeServeStarts => {
            let shell = spawn_shell();
            move_into_scope(shell.id());
            (Serve::start(&options), shell)
        }
        Moved::BetweenForkAndExec => {
            let serve = Serve::start(&options);
            let shell = spawn_shell();
            // Time for serve to see the shell's exec in the test's cgroup.
            std::thread::sleep(Duration::from_secs(1));
            move_into_scope(shell.id());
            (serve, shell)
        }
    };
    writeln!(shell.stdin.take().unwrap(), "go").unwrap();
    let group = format!("docker:{}", &id[..12]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let (_, _, body) = http_get(serve.addr, "/metrics", None).unwrap();
        if let Some(line) = body
            .lines()
            .find(|l| l.starts_with("cg_trace_energy_joules_total{") && l.contains(&group))
            .filter(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) > Some(0.0))
        {
            break line.to_string();
        }
        assert!(Instant::now() < deadline, "no energy for {group}: {body}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(line.contains(&format!("container_id=\"{id}\"")), "{line}");
    let _ = shell.kill();
    let _ = shell.wait();
    let (code, stderr) = serve.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}

/// Without privileges: one line saying what is needed, exit 2, nothing served.
#[test]
fn serve_without_privileges_says_what_is_needed_and_exits_2() {
    require_root();
    let output = cg_tests::as_nobody()
        .arg(bin("cg-trace"))
        .args(["serve", "--source", "model", "--listen"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .stdin(Stdio::null())
        .output()
        .expect("setpriv (util-linux)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("CAP_BPF") && stderr.contains("sudo"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

/// A stand-in Kubernetes API server on loopback, over TLS with a certificate for 127.0.0.1
/// that a CA made for the test signs: `GET /api/v1/pods?fieldSelector=spec.nodeName%3D`
/// [`NODE`] with the bearer [`TOKEN`] is answered with the recorded-shape pod list (200);
/// any other request with a `Status` refusal (403), as the API server's RBAC answers.
struct StandInApi {
    addr: SocketAddr,
    /// The CA's certificate (PEM), the one to trust.
    ca_pem: String,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const NODE: &str = "test-node";
const TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.c2VydmUtdGVzdA.c2lnbmF0dXJl";

/// A CA, and a certificate for 127.0.0.1 it signs: `(CA PEM, server chain, server key)`.
fn test_ca() -> (
    String,
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cg-trace test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    (
        ca.pem(),
        vec![server.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
    )
}

/// The recorded-shape pod list (cg-agent's fixture) naming `pod_uid` and `container_id`.
fn pod_list(pod_uid: &str, container_id: &str) -> String {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cg-agent/src/serve/kube/testdata/podlist.json");
    std::fs::read_to_string(fixture)
        .unwrap()
        .replace("INIT_CONTAINER_ID", &"b".repeat(64))
        .replace("SIDECAR_CONTAINER_ID", &"a".repeat(64))
        .replace("MIRROR_CONTAINER_ID", &"c".repeat(64))
        .replace("CONTAINER_ID", container_id)
        .replace("POD_UID", pod_uid)
        .replace("MIRROR_HASH", "9d4f6b1e0c2a3b5d7e8f9a0b1c2d3e4f")
        .replace("NODE_NAME", NODE)
}

impl StandInApi {
    fn start(body: String) -> Self {
        let (ca_pem, chain, key) = test_ca();
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (requests, stop) = (requests.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    requests.fetch_add(1, Ordering::SeqCst);
                    let _ = Self::answer(&config, stream, &body);
                }
            })
        };
        StandInApi {
            addr,
            ca_pem,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// One request on one connection (a TLS handshake that fails ends it).
    fn answer(
        config: &Arc<rustls::ServerConfig>,
        stream: TcpStream,
        body: &str,
    ) -> std::io::Result<()> {
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let connection =
            rustls::ServerConnection::new(config.clone()).map_err(std::io::Error::other)?;
        let mut tls = rustls::StreamOwned::new(connection, stream);
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
            tls.read_exact(&mut byte)?;
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        let wanted = format!("GET /api/v1/pods?fieldSelector=spec.nodeName%3D{NODE} HTTP/1.1\r\n");
        let authorized = head
            .lines()
            .any(|l| l.eq_ignore_ascii_case(&format!("authorization: Bearer {TOKEN}")));
        let (status, body) = if head.starts_with(&wanted) && authorized {
            ("200 OK", body.to_string())
        } else {
            (
                "403 Forbidden",
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: User \"system:serviceaccount:cg-trace:cg-trace\" cannot list resource \"pods\" in API group \"\" at the cluster scope","reason":"Forbidden","details":{"kind":"pods"},"code":403}"#.to_string(),
            )
        };
        write!(
            tls,
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )?;
        tls.conn.send_close_notify();
        tls.flush()
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for StandInApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A service account directory: `token` and `ca.crt`.
fn credentials(ca_pem: &str, token: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca_pem).unwrap();
    std::fs::write(dir.path().join("token"), format!("{token}\n")).unwrap();
    dir
}

/// A `cg-spin` workload in a cgroup shaped as a kubelet (systemd driver) and containerd make
/// a pod's container, and `serve --group-by cgroup` started beside it with `env` and
/// `args`: the `cg_trace_energy_joules_total` line of the container's group once it has
/// energy and is `wanted`, and serve's exit code and stderr after SIGTERM. The ids: `(pod UID, container id)`.
fn serve_a_pod_container(
    ids: (&str, &str),
    env: &[(&str, &str)],
    args: &[&str],
    wanted: &dyn Fn(&str) -> bool,
) -> (String, Option<i32>, String) {
    let (pod_uid, container_id) = ids;
    let unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.join("cgroup.procs").exists() && !p.join("cpu").is_dir())
        .expect("a cgroup v2 hierarchy");
    let slice = unified.join(format!("cg-trace-test-{}-kube.slice", std::process::id()));
    let pod = slice.join(format!(
        "kubepods-besteffort-pod{}.slice",
        pod_uid.replace('-', "_")
    ));
    let scope = pod.join(format!("cri-containerd-{container_id}.scope"));
    std::fs::create_dir_all(&scope).expect("creating a cgroup");
    struct Remove(Vec<std::path::PathBuf>);
    impl Drop for Remove {
        fn drop(&mut self) {
            for dir in &self.0 {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
    let _remove = Remove(vec![scope.clone(), pod, slice]);
    let mut spin = Command::new(bin("cg-spin"))
        .arg("0")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    struct Reap<'a>(&'a mut Child);
    impl Drop for Reap<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    std::fs::write(scope.join("cgroup.procs"), spin.id().to_string()).expect("moving it");
    let _reap = Reap(&mut spin);
    let mut all = vec![
        "--source",
        "model",
        "--interval",
        "100",
        "--group-by",
        "cgroup",
    ];
    all.extend_from_slice(args);
    let serve = Serve::start_with_env(&all, env);
    let group = format!("containerd:{}", &container_id[..12]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let (_, _, body) = http_get(serve.addr, "/metrics", None).unwrap();
        if let Some(line) = body
            .lines()
            .find(|l| l.starts_with("cg_trace_energy_joules_total{") && l.contains(&group))
            .filter(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) > Some(0.0))
            .filter(|l| wanted(l))
        {
            break line.to_string();
        }
        assert!(Instant::now() < deadline, "no energy for {group}: {body}");
        std::thread::sleep(Duration::from_millis(500));
    };
    // Still serving.
    let (status, _, _) = http_get(serve.addr, "/healthz", None).unwrap();
    assert_eq!(status, 200);
    let (code, stderr) = serve.terminate();
    (line, code, stderr)
}

/// The ids of a test's pod and container (apart from other tests' and runs').
fn pod_ids(salt: u128) -> (String, String) {
    let hex = format!("{:064x}", u128::from(std::process::id()) * salt);
    let id = hex[hex.len() - 64..].to_string();
    let tail = &id[32..];
    let uid = format!(
        "{}-{}-4{}-8{}-{}",
        &tail[0..8],
        &tail[8..12],
        &tail[13..16],
        &tail[17..20],
        &tail[20..32]
    );
    (uid, id)
}

/// In a pod, `serve --group-by cgroup` reads its node's pod list from the API server (here
/// a stand-in over TLS, verified against the service account's CA, with its token) and
/// labels a container's series with its namespace, pod and container names, beside the
/// pod UID and container id.
#[test]
fn serve_names_a_pod_s_container_from_the_node_s_pod_list() {
    require_root();
    let (uid, id) = pod_ids(0x9e37_79b9_7f4a_7c15_3c6e_f372);
    let api = StandInApi::start(pod_list(&uid, &id));
    let port = api.addr.port().to_string();
    let env = [
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", port.as_str()),
        ("NODE_NAME", NODE),
    ];
    let stderr = serve_with_pod_names(&api, (&uid, &id), &env, &[]);
    assert!(
        stderr.contains("namespace, pod and container labels from https://127.0.0.1:"),
        "{stderr}"
    );
}

/// `--kube-pods-url` reads the list there (a kubelet's `/pods`, say) without the in-cluster
/// environment, with the same credentials and checks.
#[test]
fn serve_reads_the_pod_list_at_the_url_given() {
    require_root();
    let (uid, id) = pod_ids(0x3c6e_f372_9e37_79b9_7f4a);
    let api = StandInApi::start(pod_list(&uid, &id));
    let url = format!(
        "https://127.0.0.1:{}/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}",
        api.addr.port()
    );
    let stderr = serve_with_pod_names(&api, (&uid, &id), &[], &["--kube-pods-url", &url]);
    assert!(stderr.contains(&format!("labels from {url}")), "{stderr}");
}

/// serve beside `api` (which lists the pod `ids`), with `env` and `args`: the container's
/// series carry its names and ids; serve's stderr.
fn serve_with_pod_names(
    api: &StandInApi,
    ids: (&str, &str),
    env: &[(&str, &str)],
    args: &[&str],
) -> String {
    let (uid, id) = ids;
    let dir = credentials(&api.ca_pem, TOKEN);
    let mut all = vec!["--kube-credentials", dir.path().to_str().unwrap()];
    all.extend_from_slice(args);
    let (line, code, stderr) =
        serve_a_pod_container((uid, id), env, &all, &|l| l.contains("namespace="));
    for label in [
        format!("container_id=\"{id}\""),
        format!("pod_uid=\"{uid}\""),
        "namespace=\"shop\"".to_string(),
        "pod=\"web-6d4cf56db6-8xk2p\"".to_string(),
        "container=\"nginx\"".to_string(),
    ] {
        assert!(line.contains(&label), "{label} missing: {line}");
    }
    assert!(api.requests() >= 1);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("pod list"), "no failure to say: {stderr}");
    assert!(
        !stderr.contains(TOKEN),
        "the token is never written: {stderr}"
    );
    stderr
}

/// What serve says, and what it serves, when the pod list cannot be read: `args`' API
/// server, with credentials trusting `ca_pem` and sending `token`.
fn serve_without_pod_names(salt: u128, port: u16, ca_pem: &str, token: &str) -> String {
    let (uid, id) = pod_ids(salt);
    let dir = credentials(ca_pem, token);
    let port = port.to_string();
    let env = [
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", port.as_str()),
        ("NODE_NAME", NODE),
    ];
    let credentials = dir.path().to_str().unwrap();
    let (line, code, stderr) = serve_a_pod_container(
        (&uid, &id),
        &env,
        &["--kube-credentials", credentials],
        &|_| true,
    );
    // The series keep their ids, without names; serve served all along and stops cleanly.
    assert!(line.contains(&format!("pod_uid=\"{uid}\"")), "{line}");
    assert!(line.contains(&format!("container_id=\"{id}\"")), "{line}");
    for name in ["namespace=", "pod=", "container="] {
        assert!(!line.contains(name), "{name} without a pod list: {line}");
    }
    assert_eq!(code, Some(0), "{stderr}");
    // Said once, with what to check.
    assert_eq!(
        stderr.matches("cannot read this node's pod list").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("tried again every 30 s"), "{stderr}");
    assert!(
        !stderr.contains(token),
        "the token is never written: {stderr}"
    );
    stderr
}

/// The API server down: a note saying what failed, no names, serve goes on serving.
#[test]
fn serve_without_the_api_server_says_so_once_and_keeps_the_ids() {
    require_root();
    let (ca_pem, _, _) = test_ca();
    let stderr = serve_without_pod_names(0x7f4a_7c15_9e37_79b9_1d2e, free_port(), &ca_pem, TOKEN);
    assert!(
        stderr.contains("cannot connect to https://127.0.0.1:"),
        "{stderr}"
    );
}

/// The API server refusing the account (RBAC): the note gives the API's message and says
/// which permission is needed.
#[test]
fn serve_refused_by_the_api_server_says_which_permission_it_needs() {
    require_root();
    let api = StandInApi::start(String::new());
    let stderr = serve_without_pod_names(
        0x5bd1_e995_7f4a_7c15_2f3e,
        api.addr.port(),
        &api.ca_pem,
        "not-the-token",
    );
    assert!(stderr.contains("answered 403 (RBAC"), "{stderr}");
    assert!(stderr.contains("cannot list resource \"pods\""), "{stderr}");
    assert!(api.requests() >= 1);
}

/// A server whose certificate the service account's CA did not sign is not trusted: the
/// token is not sent, and the note says the TLS check failed.
#[test]
fn serve_trusts_only_the_service_account_s_ca() {
    require_root();
    let api = StandInApi::start(String::new());
    let (other_ca, _, _) = test_ca();
    let stderr = serve_without_pod_names(
        0x2545_f491_4f6c_dd1d_3a4b,
        api.addr.port(),
        &other_ca,
        TOKEN,
    );
    assert!(stderr.contains("TLS with https://127.0.0.1:"), "{stderr}");
}
