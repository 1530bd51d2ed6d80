//! Buyers whose purchase requests are written whole, each on a connection
//! of its own, before any is answered: for the tests of a sale lane, which
//! hold its pass back until the instance has read every request (they
//! wait in its lane by then), however long a loaded machine takes.

use std::collections::HashSet;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::TestApp;

/// The buyers' connections, their requests sent.
pub struct RawBuyers {
    sockets: Vec<TcpStream>,
}

impl RawBuyers {
    /// Send `count` purchases of `sale`, by `{prefix}-0`, `{prefix}-1`...
    pub async fn send(app: &TestApp, sale: i64, prefix: &str, count: usize) -> Self {
        let address = app.address.trim_start_matches("http://").to_owned();
        let mut sockets = Vec::new();
        for i in 0..count {
            let body = format!(r#"{{"user_id":"{prefix}-{i}"}}"#);
            let request = format!(
                "POST /api/sales/{sale}/purchase HTTP/1.1\r\nHost: {address}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let mut socket = TcpStream::connect(&address).await.expect("connect");
            socket
                .write_all(request.as_bytes())
                .await
                .expect("write the request");
            sockets.push(socket);
        }
        Self { sockets }
    }

    /// Wait (a minute at most) until the instance has read every request.
    pub async fn all_read(&self) {
        let port = self.sockets[0]
            .peer_addr()
            .expect("the instance's address")
            .port();
        let clients: HashSet<u16> = (self.sockets.iter())
            .map(|socket| socket.local_addr().expect("an address").port())
            .collect();
        let count = self.sockets.len();
        super::eventually(
            Duration::from_secs(60),
            &format!("the instance to read all {count} requests"),
            || async { requests_read(port, &clients) == count },
        )
        .await;
    }

    /// Each buyer's answer's status, in the order they were sent.
    pub async fn statuses(self) -> Vec<u16> {
        futures::future::join_all(self.sockets.into_iter().map(|mut socket| async move {
            let mut answer = String::new();
            socket
                .read_to_string(&mut answer)
                .await
                .expect("read the answer");
            answer
                .split(' ')
                .nth(1)
                .and_then(|status| status.parse::<u16>().ok())
                .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"))
        }))
        .await
    }
}

/// How many of the connections from `clients` (their local ports) to the
/// instance on `port` had their request read to the end: the instance's
/// side holds nothing unread, the client's nothing unsent. From the
/// kernel's table of TCP sockets (`/proc/net/tcp`: addresses as `hex
/// ip:hex port`, the state `01` for established, the queues as `hex
/// send:hex receive`).
fn requests_read(port: u16, clients: &HashSet<u16>) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port_of = |address: &str| {
        address
            .rsplit(':')
            .next()
            .and_then(|hex| u16::from_str_radix(hex, 16).ok())
    };
    // (local port, remote port, state, queues) of every socket.
    let sockets: Vec<(u16, u16, &str, &str)> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some((
                port_of(fields.get(1)?)?,
                port_of(fields.get(2)?)?,
                *fields.get(3)?,
                *fields.get(4)?,
            ))
        })
        .collect();
    let sent: HashSet<u16> = sockets
        .iter()
        .filter(|(local, remote, _, queues)| {
            clients.contains(local) && *remote == port && queues.starts_with("00000000:")
        })
        .map(|(local, ..)| *local)
        .collect();
    sockets
        .iter()
        .filter(|(local, remote, state, queues)| {
            *local == port
                && sent.contains(remote)
                && *state == "01"
                && queues.ends_with(":00000000")
        })
        .count()
}
