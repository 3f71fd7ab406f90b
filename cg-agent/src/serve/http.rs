//! The exporter's HTTP/1.1 server for `/metrics` and `/healthz`, on hyper and the tokio
//! runtime: hyper parses requests (the head bounded to [`MAX_HEAD_BYTES`] and read within
//! [`READ_TIMEOUT`]) and this module keeps the connections within a budget
//! ([`MAX_CONNECTIONS`]) where a slow client never locks a scrape out: when the budget is
//! spent, the oldest connection still waiting for its request head makes room for the new
//! one. One request per connection, answered within [`WRITE_TIMEOUT`]. What is answered is
//! the handler's business (`serve::respond`, a pure function of the request).

use std::{
    collections::{BTreeMap, BTreeSet},
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use http_body_util::Full;
use hyper::{body::Bytes, header, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::Notify,
};

/// Longest request head (request line and headers) read: longer ones are answered 431.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// How long a client has to send its request head, from the moment it connects.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client has to take the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections held at once. One that has sent a byte costs about 10 KB (hyper's 8 KiB
/// read buffer and the task), so the budget bounds what any number of sockets can take
/// (5,000 sockets took 7.6 MB more with 512 places, 13 MB with 1,024); a scraper needs
/// only one.
pub const MAX_CONNECTIONS: usize = 512;

/// A request, as much of it as the answer depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The `Accept` header, when sent (and readable as text).
    pub accept: Option<String>,
}

impl Request {
    /// The parts of a parsed request head that matter here.
    pub fn from_head<B>(head: &hyper::Request<B>) -> Self {
        Request {
            method: head.method().as_str().to_string(),
            path: head.uri().path().to_string(),
            accept: head
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        }
    }
}

/// An answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    /// The answer as hyper writes it (hyper adds `Content-Length`, and leaves the body out
    /// of the answer to a HEAD request).
    fn into_hyper(self) -> hyper::Response<Full<Bytes>> {
        let mut answer = hyper::Response::new(Full::new(Bytes::from(self.body)));
        *answer.status_mut() = hyper::StatusCode::from_u16(self.status)
            .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
        let headers = answer.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(self.content_type),
        );
        if self.status == 405 {
            headers.insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        }
        answer
    }
}

/// The server's handler: maps a request to an answer (called on the server's thread).
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// The connections held now, and which of them still wait for their request head, each
/// with the signal that closes it (by arrival: ids only grow).
#[derive(Debug, Default)]
struct Budget {
    next_id: u64,
    open: BTreeSet<u64>,
    waiting: BTreeMap<u64, Arc<Notify>>,
}

/// What [`Budget::admit`] decided for a new connection.
#[derive(Debug)]
enum Admission {
    /// Served under this id; `evicted`, when some, is the connection that made room.
    Admitted {
        id: u64,
        close: Arc<Notify>,
        evicted: Option<Arc<Notify>>,
    },
    /// The budget is spent on connections being answered: closed at once.
    Refused,
}

impl Budget {
    /// Admits a connection within `max`: when all places are taken, the oldest connection
    /// still waiting for its request head gives up its place.
    fn admit(&mut self, max: usize) -> Admission {
        let mut evicted = None;
        if self.open.len() >= max {
            match self.waiting.pop_first() {
                Some((oldest, close)) => {
                    self.open.remove(&oldest);
                    evicted = Some(close);
                }
                None => return Admission::Refused,
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(id);
        let close = Arc::new(Notify::new());
        self.waiting.insert(id, close.clone());
        Admission::Admitted { id, close, evicted }
    }

    /// Connection `id` has sent its request: it is answered, never evicted.
    fn answering(&mut self, id: u64) {
        self.waiting.remove(&id);
    }

    /// Connection `id` is closed (for whatever reason; an evicted one was counted out
    /// already).
    fn closed(&mut self, id: u64) {
        self.waiting.remove(&id);
        self.open.remove(&id);
    }
}

/// The budget, shared by the accepting loop and the connections.
type SharedBudget = Arc<Mutex<Budget>>;

fn with_budget<T>(budget: &SharedBudget, f: impl FnOnce(&mut Budget) -> T) -> T {
    // A panic while the lock was held cannot leave the books half-written: each change is
    // a few plain assignments.
    let mut guard = budget
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut guard)
}

/// hyper's HTTP/1.1 settings: one request per connection, the head bounded in size and
/// time.
fn protocol() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .max_header_size(MAX_HEAD_BYTES)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(false);
    builder
}

/// Serves one connection until it is answered, evicted, or out of time.
async fn connection(
    stream: TcpStream,
    protocol: http1::Builder,
    handler: Handler,
    budget: SharedBudget,
    id: u64,
    close: Arc<Notify>,
) {
    let answering = budget.clone();
    let service = service_fn(move |head: hyper::Request<hyper::body::Incoming>| {
        with_budget(&answering, |b| b.answering(id));
        let answer = handler(&Request::from_head(&head)).into_hyper();
        async move { Ok::<_, Infallible>(answer) }
    });
    let served = protocol.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = served => {}
        _ = close.notified() => {}
        _ = tokio::time::sleep(READ_TIMEOUT + WRITE_TIMEOUT) => {}
    }
    with_budget(&budget, |b| b.closed(id));
}

/// Serves `listener` until `stop` is notified.
pub async fn serve(listener: TcpListener, handler: Handler, stop: Arc<Notify>) {
    let budget = SharedBudget::default();
    let protocol = protocol();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.notified() => return,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors or the like: try again shortly rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Admission::Admitted { id, close, evicted } =
            with_budget(&budget, |b| b.admit(MAX_CONNECTIONS))
        else {
            drop(stream);
            continue;
        };
        if let Some(evicted) = evicted {
            evicted.notify_one();
        }
        tokio::spawn(connection(
            stream,
            protocol.clone(),
            handler.clone(),
            budget.clone(),
            id,
            close,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn admitted(admission: Admission) -> (u64, bool) {
        match admission {
            Admission::Admitted { id, evicted, .. } => (id, evicted.is_some()),
            Admission::Refused => panic!("refused"),
        }
    }

    // Budget of 3; W = waiting for its head, A = being answered:
    //
    //   admit 0,1,2    0:W 1:W 2:W      full
    //   1 answers      0:W 1:A 2:W
    //   admit 3        1:A 2:W 3:W      0, the oldest waiting, made room
    //   admit 4        1:A 3:W 4:W      then 2 (1 is answered: kept)
    //   3, 4 answer    1:A 3:A 4:A
    //   admit          refused          nobody waits: no room
    //   1 closes       3:A 4:A          a place is free
    //   admit 5        3:A 4:A 5:W
    #[test]
    fn the_oldest_connection_waiting_for_its_head_makes_room_for_a_new_one() {
        let mut budget = Budget::default();
        for expected in 0..3 {
            assert_eq!(admitted(budget.admit(3)), (expected, false));
        }
        budget.answering(1);
        assert_eq!(admitted(budget.admit(3)), (3, true));
        assert!(!budget.waiting.contains_key(&0));
        assert_eq!(admitted(budget.admit(3)), (4, true));
        assert_eq!(budget.waiting.keys().copied().collect::<Vec<_>>(), [3, 4]);
        // The evicted ones close later (even after their request came in): counted out once.
        budget.closed(0);
        budget.answering(2);
        budget.closed(2);
        budget.answering(3);
        budget.answering(4);
        assert!(matches!(budget.admit(3), Admission::Refused));
        budget.closed(1);
        assert_eq!(budget.open.len(), 2);
        assert_eq!(admitted(budget.admit(3)), (5, false));
        assert_eq!(budget.open.len(), 3);
    }

    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[test]
    fn answers_oversized_and_malformed_requests_and_keeps_serving() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let stop = Arc::new(Notify::new());
            let handler: Handler =
                Arc::new(|r: &Request| Response::text(200, format!("{} {:?}", r.path, r.accept)));
            let server = tokio::spawn(serve(listener, handler, stop.clone()));
            // A client that never sends anything holds its connection only.
            let _silent = TcpStream::connect(addr).await.unwrap();
            let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(64 * 1024));
            let answer = exchange(addr, huge.as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
            let answer = exchange(addr, b"BLAH\r\n\r\n").await;
            assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
            let answer = exchange(
                addr,
                b"GET /metrics?x=1 HTTP/1.1\r\naccept: application/openmetrics-text\r\n\r\n",
            )
            .await;
            assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
            assert!(answer.contains("connection: close\r\n"), "{answer}");
            assert!(
                answer.ends_with("\r\n\r\n/metrics Some(\"application/openmetrics-text\")"),
                "{answer}"
            );
            let answer = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
            assert!(answer.contains("content-length: 13\r\n"), "{answer}");
            assert!(answer.ends_with("\r\n\r\n"), "{answer}");
            stop.notify_one();
            server.await.unwrap();
        });
    }
}
