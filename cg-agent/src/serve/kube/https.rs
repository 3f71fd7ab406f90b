//! One HTTPS GET of this node's pod list from the Kubernetes API server (or a kubelet):
//! rustls (its `ring` provider) verifying the server against the service account's
//! `ca.crt`, the account's token as the bearer, hyper's HTTP/1.1 client on the caller's
//! tokio runtime, and the answer's body bounded. The token is never written anywhere.

use std::{
    fmt,
    io::Read,
    path::{Path, PathBuf},
    sync::Arc,
};

use http_body_util::{BodyExt, Empty, Limited};
use hyper::{
    body::Bytes,
    header::{ACCEPT, AUTHORIZATION, HOST, HeaderValue, USER_AGENT},
};
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio_rustls::{
    TlsConnector,
    rustls::{ClientConfig, RootCertStore, crypto::ring},
};

use crate::printable;

/// Longest token and CA file read (a service account token is about 1 KB).
const MAX_CREDENTIAL_BYTES: u64 = 256 * 1024;
/// How much of a refusal's body is read for its message.
const MAX_REFUSAL_BYTES: usize = 64 * 1024;

/// An `https://HOST[:PORT]/PATH[?QUERY]` address (HOST a name, an IPv4 address or a
/// bracketed IPv6 one). Nothing else: no user info, no plain HTTP (the token would travel
/// in clear).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// Without brackets.
    pub host: String,
    pub port: u16,
    /// With the query.
    pub path: String,
}

impl Url {
    pub fn parse(text: &str) -> Result<Url, String> {
        let bad = |why: &str| format!("{}: {why}", printable::fit(text, 200));
        let rest = text
            .strip_prefix("https://")
            .ok_or_else(|| bad("an https:// URL is needed (the token is not sent in clear)"))?;
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, "/"),
        };
        if path.len() > 2048 || !path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad("the path must be printable ASCII, without spaces"));
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
                (host, after.strip_prefix(':'))
            }
            None => match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            },
        };
        let port = match port {
            Some(port) => port
                .parse::<u16>()
                .map_err(|_| bad("the port must be 1 to 65535"))?,
            None => 443,
        };
        let host_ok = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
        if !host_ok || port == 0 {
            return Err(bad(
                "the host must be a name or an IP address, the port 1 to 65535",
            ));
        }
        Ok(Url {
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }

    /// `host:port` as the Host header and messages write it.
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "https://{}{}", self.authority(), self.path)
    }
}

/// What went wrong, each saying what to check.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "cannot read {}: {source} (the service account's token and ca.crt: mount them with \
         automountServiceAccountToken: true, or point --kube-credentials at them)",
        path.display()
    )]
    Credentials {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    BadCredentials { path: PathBuf, why: &'static str },
    #[error("cannot connect to {url}: {source} (is the API server reachable from the pod?)")]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "TLS with {url} failed: {source} (the server must present a certificate ca.crt signs, for that host)"
    )]
    Tls {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP with {url} failed: {source}")]
    Http {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{url} answered {status}{}: {message}", hint(*status))]
    Refused {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url} sent more than {limit_mib} MiB: not read")]
    TooLarge { url: String, limit_mib: usize },
}

/// What a refusal's status asks the user to check.
fn hint(status: u16) -> &'static str {
    match status {
        401 => " (the token was not accepted: is it the pod's service account token, not expired?)",
        403 => {
            " (RBAC: the service account needs get and list on pods, as deploy/kubernetes's \
             ClusterRole cg-trace-pod-reader grants; nodes/proxy for a kubelet's /pods)"
        }
        _ => "",
    }
}

/// A file of the credentials directory, at most [`MAX_CREDENTIAL_BYTES`].
fn read_credential(dir: &Path, name: &str) -> Result<Vec<u8>, FetchError> {
    let path = dir.join(name);
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_CREDENTIAL_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|source| FetchError::Credentials {
            path: path.clone(),
            source,
        })?;
    if bytes.len() as u64 > MAX_CREDENTIAL_BYTES {
        return Err(FetchError::BadCredentials {
            path,
            why: "too large to be a token or a CA",
        });
    }
    Ok(bytes)
}

/// The bearer header from the token file (its text, trimmed).
fn bearer(dir: &Path) -> Result<HeaderValue, FetchError> {
    let bad = || FetchError::BadCredentials {
        path: dir.join("token"),
        why: "not a token (empty, or not printable ASCII)",
    };
    let token = read_credential(dir, "token")?;
    let token = std::str::from_utf8(&token).map_err(|_| bad())?.trim();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| bad())?;
    value.set_sensitive(true);
    Ok(value)
}

/// A TLS client trusting only the certificates of `ca.crt`.
fn tls_config(dir: &Path) -> Result<ClientConfig, FetchError> {
    let path = dir.join("ca.crt");
    let bad = |why| FetchError::BadCredentials {
        path: path.clone(),
        why,
    };
    let pem = read_credential(dir, "ca.crt")?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|_| bad("not a PEM certificate file"))?;
        roots
            .add(cert)
            .map_err(|_| bad("holds a certificate that does not parse"))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no certificate"));
    }
    Ok(
        ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|_| bad("no TLS version in common"))?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// GETs `url` with the credentials of `dir`; the body of a 200 answer, at most `limit`
/// bytes. The caller bounds the time.
pub async fn get(url: &Url, dir: &Path, limit: usize) -> Result<Vec<u8>, FetchError> {
    let shown = url.to_string();
    let auth = bearer(dir)?;
    let config = tls_config(dir)?;
    let server_name = ServerName::try_from(url.host.clone()).map_err(|_| FetchError::Tls {
        url: shown.clone(),
        source: std::io::Error::other("not a host name TLS can verify"),
    })?;
    let tcp = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|source| FetchError::Connect {
            url: shown.clone(),
            source,
        })?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(|source| FetchError::Tls {
            url: shown.clone(),
            source,
        })?;
    let http = |source: Box<dyn std::error::Error + Send + Sync>| FetchError::Http {
        url: shown.clone(),
        source,
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| http(e.into()))?;
    // Drives the connection while the request runs; ends when `sender` is dropped.
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = hyper::Request::get(url.path.as_str())
        .header(HOST, url.authority())
        .header(AUTHORIZATION, auth)
        .header(ACCEPT, "application/json")
        .header(USER_AGENT, concat!("cg-trace/", env!("CARGO_PKG_VERSION")))
        .body(Empty::<Bytes>::new())
        .map_err(|e| http(e.into()))?;
    let answer = sender.send_request(request).await;
    let result = match answer {
        Err(e) => Err(http(e.into())),
        Ok(response) => {
            let status = response.status().as_u16();
            let ok = status == 200;
            let room = if ok { limit } else { MAX_REFUSAL_BYTES };
            match Limited::new(response.into_body(), room).collect().await {
                Ok(body) if ok => Ok(body.to_bytes().to_vec()),
                Ok(body) => Err(FetchError::Refused {
                    url: shown.clone(),
                    status,
                    message: refusal_message(&body.to_bytes()),
                }),
                Err(e) if e.is::<http_body_util::LengthLimitError>() && ok => {
                    Err(FetchError::TooLarge {
                        url: shown.clone(),
                        limit_mib: limit >> 20,
                    })
                }
                Err(e) => Err(http(e)),
            }
        }
    };
    drop(sender);
    driver.abort();
    result
}

/// The `message` of a Kubernetes `Status` answer, printable and short; else the body's start.
fn refusal_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Status {
        message: String,
    }
    let text = match serde_json::from_slice::<Status>(body) {
        Ok(status) => status.message,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
    };
    printable::fit(text.trim(), 300)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_https_urls_and_refuses_the_rest() {
        let url = Url::parse("https://10.96.0.1:443/api/v1/pods?fieldSelector=spec.nodeName%3Dn1")
            .unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.path.as_str()),
            (
                "10.96.0.1",
                443,
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"
            )
        );
        let kubelet = Url::parse("https://node-a.example:10250/pods").unwrap();
        assert_eq!(kubelet.to_string(), "https://node-a.example:10250/pods");
        let v6 = Url::parse("https://[fd00::1]:6443/pods").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("fd00::1", 6443));
        assert_eq!(v6.to_string(), "https://[fd00::1]:6443/pods");
        assert_eq!(Url::parse("https://api.local").unwrap().path, "/");
        for bad in [
            "http://10.0.0.1/pods",
            "https://user:pw@host/pods",
            "https://host:99999/pods",
            "https://host:0/pods",
            "https:///pods",
            "https://host/po ds",
            "https://ho\u{1b}st/pods",
            "https://[fd00::1/pods",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_refusal_says_the_api_s_message_and_what_to_check() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods is forbidden: User \"system:serviceaccount:cg-trace:cg-trace\" cannot list resource \"pods\"\u001b[2J","reason":"Forbidden","code":403}"#;
        let err = FetchError::Refused {
            url: "https://10.96.0.1:443/api/v1/pods".into(),
            status: 403,
            message: refusal_message(body),
        };
        let text = err.to_string();
        assert!(text.contains("answered 403 (RBAC"), "{text}");
        assert!(
            text.contains("cannot list resource \"pods\"\\x1b[2J"),
            "{text}"
        );
        assert!(refusal_message(b"<html>bad gateway</html>").contains("bad gateway"));
    }

    #[test]
    fn credentials_that_are_not_a_token_or_a_ca_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            bearer(dir.path()),
            Err(FetchError::Credentials { .. })
        ));
        std::fs::write(dir.path().join("token"), "abc\ndef").unwrap();
        assert!(matches!(
            bearer(dir.path()),
            Err(FetchError::BadCredentials { .. })
        ));
        std::fs::write(dir.path().join("token"), "eyJhbGciOi.x-y_z\n").unwrap();
        let value = bearer(dir.path()).unwrap();
        assert!(value.is_sensitive());
        assert_eq!(value.to_str().unwrap(), "Bearer eyJhbGciOi.x-y_z");
        std::fs::write(dir.path().join("ca.crt"), "not a certificate").unwrap();
        let err = tls_config(dir.path()).unwrap_err().to_string();
        assert!(err.contains("holds no certificate"), "{err}");
    }
}
