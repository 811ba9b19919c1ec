//! HTTP/1.1, by two pools over one ledger ([`ledger`]):
//!
//! - [`Http1Client`] ([`client`], [`conn`]): each request is a
//!   future that leases a connection and drives it, for every loop and
//!   any number of hosts;
//! - [`DirectPool`] ([`direct`]): the open loop writes and reads its
//!   connections itself from its own epoll set, for one host.
//!
//! Both speak through the same codec ([`wire`]), which the event-stream
//! subscriber reads its streams with too, and read answers the same way
//! ([`read`]).

mod client;
mod conn;
mod direct;
mod ledger;
mod read;
pub(crate) mod wire;

pub(super) use client::Http1Client;
pub(crate) use direct::{DirectPool, Fixed, Outgoing};

/// A test server's side of a keep-alive connection: waits for the next
/// whole request head in `pending` (reading more as needed) and drops it;
/// false once the client has closed.
#[cfg(test)]
pub(in crate::client) async fn next_request_head(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    pending: &mut Vec<u8>,
) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..end + 4);
            return true;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    }
}
