//! The control thread's sockets: the Unix control socket (mode 0600, one JSON request per line,
//! see [`crate::ctl`]) and the Prometheus endpoint (`GET /metrics` on a loopback address).
//! Both are non-blocking and served from [`ControlServer::poll`], which the control loop calls
//! every few milliseconds; nothing here touches the packet path.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::ctl::Control;

/// Longest request line accepted.
const MAX_LINE: usize = 64 * 1024;
/// Connected clients kept at once; more are answered with an error and closed.
const MAX_CLIENTS: usize = 64;

struct Client {
    stream: UnixStream,
    buf: Vec<u8>,
}

/// The listening sockets and the connected clients.
pub struct ControlServer {
    socket_path: Option<PathBuf>,
    unix: Option<UnixListener>,
    clients: Vec<Client>,
    http: Option<TcpListener>,
}

impl ControlServer {
    /// Binds the control socket at `socket` (refusing one another switch still answers on) and
    /// the metrics endpoint at `metrics` (loopback addresses only).
    ///
    /// # Errors
    /// What could not be bound, and why.
    pub fn bind(
        socket: Option<&Path>,
        metrics: Option<SocketAddr>,
    ) -> anyhow::Result<ControlServer> {
        let mut unix = None;
        if let Some(path) = socket {
            if path.exists() {
                use std::os::unix::fs::FileTypeExt;
                let is_socket = std::fs::symlink_metadata(path)
                    .map(|m| m.file_type().is_socket())
                    .unwrap_or(false);
                if !is_socket {
                    bail!(
                        "{}: exists and is not a socket; choose another --socket path",
                        path.display()
                    );
                }
                if UnixStream::connect(path).is_ok() {
                    bail!("{}: another switch is listening there", path.display());
                }
                std::fs::remove_file(path)
                    .with_context(|| format!("removing the stale socket {}", path.display()))?;
            }
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let l = UnixListener::bind(path)
                .with_context(|| format!("binding the control socket {}", path.display()))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("making {} private", path.display()))?;
            l.set_nonblocking(true)?;
            unix = Some(l);
        }
        let mut http = None;
        if let Some(addr) = metrics {
            if !addr.ip().is_loopback() {
                bail!(
                    "metrics address {addr}: only loopback addresses (127.0.0.1, ::1) are served"
                );
            }
            let l = TcpListener::bind(addr)
                .with_context(|| format!("binding the metrics endpoint {addr}"))?;
            l.set_nonblocking(true)?;
            http = Some(l);
        }
        Ok(ControlServer {
            socket_path: socket.map(Path::to_path_buf),
            unix,
            clients: Vec::new(),
            http,
        })
    }

    /// The metrics endpoint's address (useful with port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Accepts, reads and answers whatever is pending. Returns true when it did something.
    pub fn poll(&mut self, ctl: &mut Control) -> bool {
        let mut work = false;
        if let Some(l) = &self.unix {
            while let Ok((mut s, _)) = l.accept() {
                work = true;
                if self.clients.len() >= MAX_CLIENTS {
                    let _ =
                        s.write_all(b"{\"ok\":false,\"error\":\"too many control connections\"}\n");
                    continue;
                }
                if s.set_nonblocking(true).is_ok() {
                    self.clients.push(Client {
                        stream: s,
                        buf: Vec::new(),
                    });
                }
            }
        }
        let mut keep = Vec::with_capacity(self.clients.len());
        for mut c in self.clients.drain(..) {
            let mut alive = true;
            let mut chunk = [0u8; 4096];
            loop {
                match c.stream.read(&mut chunk) {
                    Ok(0) => {
                        alive = false;
                        break;
                    }
                    Ok(n) => {
                        c.buf.extend_from_slice(&chunk[..n]);
                        work = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        alive = false;
                        break;
                    }
                }
            }
            while let Some(end) = c.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = c.buf.drain(..=end).collect();
                let text = String::from_utf8_lossy(&line[..line.len() - 1])
                    .trim()
                    .to_string();
                if text.is_empty() {
                    continue;
                }
                let answer = ctl.handle_line(&text);
                if write_all_blocking(&mut c.stream, format!("{answer}\n").as_bytes()).is_err() {
                    alive = false;
                    break;
                }
            }
            if c.buf.len() > MAX_LINE {
                let _ = write_all_blocking(
                    &mut c.stream,
                    b"{\"ok\":false,\"error\":\"request line too long\"}\n",
                );
                alive = false;
            }
            if alive {
                keep.push(c);
            }
        }
        self.clients = keep;
        if let Some(l) = &self.http {
            while let Ok((s, _)) = l.accept() {
                work = true;
                serve_http(s, ctl);
            }
        }
        ctl.pump_captures();
        work
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        if let Some(p) = &self.socket_path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Writes everything to a non-blocking stream, waiting up to a second for room.
fn write_all_blocking(s: &mut UnixStream, mut data: &[u8]) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(1);
    while !data.is_empty() {
        match s.write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn serve_http(mut s: TcpStream, ctl: &Control) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let mut req = Vec::new();
    let mut chunk = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => req.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&req);
    let first = head.lines().next().unwrap_or("");
    let (status, ctype, body) = if first.starts_with("GET /metrics ") || first == "GET /metrics" {
        (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            ctl.metrics(),
        )
    } else {
        (
            "404 Not Found",
            "text/plain",
            "only GET /metrics is served here\n".to_string(),
        )
    };
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_refuses_files_and_live_sockets_and_replaces_stale_ones() {
        let dir = std::env::temp_dir().join(format!("ssw-srv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("not-a-socket");
        std::fs::write(&file, "keep me").unwrap();
        let e = ControlServer::bind(Some(&file), None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

        let sock = dir.join("ctl.sock");
        let first = ControlServer::bind(Some(&sock), None).unwrap();
        let e = ControlServer::bind(Some(&sock), None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("another switch"), "{e}");
        drop(first);
        assert!(!sock.exists(), "removed when the server goes");
        // A stale socket file (its owner died without removing it) is replaced.
        let stale = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        drop(stale);
        assert!(sock.exists());
        let again = ControlServer::bind(Some(&sock), None).unwrap();
        drop(again);
        let e = ControlServer::bind(None, Some("192.0.2.1:9464".parse().unwrap()))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("only loopback"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
