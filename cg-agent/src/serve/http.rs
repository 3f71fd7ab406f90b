//! A small HTTP/1.1 server for `/metrics` and `/healthz`: one request per connection, the
//! request head bounded in size ([`MAX_HEAD_BYTES`]) and time ([`READ_TIMEOUT`]), the answer
//! in time ([`WRITE_TIMEOUT`]), at most [`MAX_CONNECTIONS`] at once. It runs on its own
//! thread: a scrape that is slow or never finishes holds one connection, never the
//! measurement or the other scrapes.

use std::{sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{Notify, Semaphore},
};

/// Longest request head (request line and headers) read.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// How long a client has to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client has to take the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are answered 503 at once.
pub const MAX_CONNECTIONS: usize = 32;

/// A parsed request: what the server answers depends on nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The `Accept` header, when sent.
    pub accept: Option<String>,
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

    fn bytes(&self, head_only: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "Error",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: \
             close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if self.status == 405 {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        if !head_only {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

/// Why a request head could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("request head larger than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

/// Parses a request head (up to and without the blank line).
pub fn parse_head(head: &[u8]) -> Result<Request, HeadError> {
    let head = std::str::from_utf8(head).map_err(|_| HeadError::Malformed("not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().ok_or(HeadError::Malformed("empty"))?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed("bad request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(HeadError::Malformed("not HTTP/1.x"));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HeadError::Malformed("bad method"));
    }
    if !target.starts_with('/') {
        return Err(HeadError::Malformed("bad target"));
    }
    let path = target.split('?').next().unwrap_or(target).to_string();
    let mut accept = None;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or(HeadError::Malformed("bad header line"))?;
        if name.eq_ignore_ascii_case("accept") {
            accept = Some(value.trim().to_string());
        }
    }
    Ok(Request {
        method: method.to_string(),
        path,
        accept,
    })
}

/// Reads a request head from `stream`, at most [`MAX_HEAD_BYTES`].
async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|_| HeadError::Malformed("read failed"))?;
        if n == 0 {
            return Err(HeadError::Malformed(
                "connection closed before the head ended",
            ));
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
    }
}

/// The server's handler: maps a request to an answer (called on the server's thread).
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

async fn handle(mut stream: TcpStream, handler: Handler) {
    let response = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Err(_) => Response::text(408, "request head not received in time\n"),
        Ok(Err(HeadError::TooLarge)) => Response::text(431, format!("{}\n", HeadError::TooLarge)),
        Ok(Err(err)) => Response::text(400, format!("{err}\n")),
        Ok(Ok(head)) => match parse_head(&head) {
            Ok(request) => {
                let head_only = request.method == "HEAD";
                let response = handler(&request);
                let _ = tokio::time::timeout(
                    WRITE_TIMEOUT,
                    stream.write_all(&response.bytes(head_only)),
                )
                .await;
                let _ = stream.shutdown().await;
                return;
            }
            Err(err) => Response::text(400, format!("{err}\n")),
        },
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&response.bytes(false))).await;
    let _ = stream.shutdown().await;
}

/// Serves `listener` until `stop` is notified.
pub async fn serve(listener: TcpListener, handler: Handler, stop: Arc<Notify>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.notified() => return,
        };
        let Ok((mut stream, _)) = accepted else {
            // Out of descriptors or the like: try again shortly rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                let handler = handler.clone();
                tokio::spawn(async move {
                    handle(stream, handler).await;
                    drop(permit);
                });
            }
            Err(_) => {
                tokio::spawn(async move {
                    let busy = Response::text(503, "too many connections\n");
                    let _ = tokio::time::timeout(
                        Duration::from_secs(1),
                        stream.write_all(&busy.bytes(false)),
                    )
                    .await;
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_scrape_request_and_its_accept_header() {
        let head = b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\naccept: application/openmetrics-text; version=1.0.0";
        let request = parse_head(head).unwrap();
        assert_eq!(request.method, "GET");
        assert_eq!(request.path, "/metrics");
        assert_eq!(
            request.accept.as_deref(),
            Some("application/openmetrics-text; version=1.0.0")
        );
    }

    #[test]
    fn refuses_malformed_heads() {
        for head in [
            &b""[..],
            b"GET",
            b"GET /metrics",
            b"GET /metrics HTTP/2 extra",
            b"GET metrics HTTP/1.1",
            b"get /metrics HTTP/1.1",
            b"GET /metrics SPDY/3",
            b"GET /metrics HTTP/1.1\r\nno colon here",
            b"GET /\xff HTTP/1.1",
        ] {
            assert!(
                matches!(parse_head(head), Err(HeadError::Malformed(_))),
                "{head:?}"
            );
        }
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
            let handler: Handler = Arc::new(|r: &Request| Response::text(200, r.path.clone()));
            let server = tokio::spawn(serve(listener, handler, stop.clone()));
            // A client that never sends anything holds its connection only.
            let _silent = TcpStream::connect(addr).await.unwrap();
            let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(64 * 1024));
            let answer = exchange(addr, huge.as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
            let answer = exchange(addr, b"BLAH\r\n\r\n").await;
            assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
            let answer = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
            assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
            assert!(answer.ends_with("\r\n\r\n/metrics"), "{answer}");
            let answer = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
            assert!(answer.contains("Content-Length: 8\r\n"), "{answer}");
            assert!(answer.ends_with("\r\n\r\n"), "{answer}");
            stop.notify_one();
            server.await.unwrap();
        });
    }
}
