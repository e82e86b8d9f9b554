//! A minimal HTTP/1.1 client on loopback for the tests of the HTTP side.
//! It reads and writes with `readable`/`try_read` and `writable`/`try_write`
//! because the agent builds tokio without its `io-util` extension traits.

use std::io;
use std::time::Duration;

use tokio::net::TcpStream;

/// Wait for the bytes the kernel has for `stream`: how many were read
/// into `buf`, 0 at the end of the stream.
pub(super) async fn read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read(buf) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            result => return result,
        }
    }
}

/// Write all of `data` to `stream`.
pub(super) async fn write_all(stream: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        stream.writable().await?;
        match stream.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// Send a GET of `path` on `stream`, kept alive afterwards.
pub(super) async fn send_get(stream: &TcpStream, path: &str) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    write_all(stream, request.as_bytes()).await.unwrap();
}

/// Read one response with a Content-Length body (what axum sends for a
/// fixed body): (status, body). Panics when none comes within 5 s.
pub(super) async fn read_response(stream: &TcpStream) -> (u16, String) {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), read_some(stream, &mut buf))
            .await
            .expect("a response in time")
            .unwrap();
        assert!(n > 0, "closed before a whole response");
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_owned)
            })
            .expect("a Content-Length")
            .parse()
            .unwrap();
        if body.len() >= length {
            let status = head[9..12].parse().unwrap();
            return (status, body.to_owned());
        }
    }
}

/// Whether the server closes `stream` within `wait` (bytes it sends
/// meanwhile are skipped).
pub(super) async fn closed_by_server(stream: &TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, read_some(stream, &mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}
