//! Socket options and reads that tokio's `TcpSocket` does not expose.

use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::socket::sockopt::{IpBindAddressNoPort, ReceiveTimestampns};
use nix::sys::socket::{recvmsg, setsockopt, ControlMessageOwned, MsgFlags};
use tokio::time::Instant;

use crate::Error;

/// Lets `bind(ip, 0)` leave the port to `connect()` (`IP_BIND_ADDRESS_NO_PORT`).
/// Otherwise the kernel must pick a port unique for the source address
/// alone, scanning every socket (TIME_WAIT ones too) bound to it: slow, and
/// exhausted after ~28k connections, where `connect()` can reuse a port for
/// another destination.
pub fn bind_address_no_port(socket: &impl AsFd) -> Result<(), Error> {
    setsockopt(socket, IpBindAddressNoPort, &true)
        .map_err(Error::os("setsockopt(IP_BIND_ADDRESS_NO_PORT)"))
}

/// Has the kernel stamp every segment this socket receives with the moment
/// it reached the machine (`SO_TIMESTAMPNS`), which [`recv_stamped`] then
/// returns. With it, an answer's time no longer depends on when the reader
/// got round to reading it, so a reader may read on its own schedule.
pub fn stamp_arrivals(socket: &impl AsFd) -> Result<(), Error> {
    setsockopt(socket, ReceiveTimestampns, &true).map_err(Error::os("setsockopt(SO_TIMESTAMPNS)"))
}

/// When the kernel received a segment, on the wall clock: the only clock
/// socket stamps come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival(Duration);

impl Arrival {
    /// The same moment on the monotonic clock `Instant` reads; `None` when
    /// it would lie in the future, which only a step of the wall clock
    /// since the stamp can do (the caller then has no better time than
    /// now).
    pub fn instant(self) -> Option<Instant> {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        let now = Instant::now();
        now.checked_sub(wall.checked_sub(self.0)?)
    }
}

/// Reads like `read(2)` on a non-blocking socket, and also says when the
/// last segment read reached the machine, if the socket stamps arrivals
/// ([`stamp_arrivals`]). A read with no data (the peer's FIN) has no stamp.
pub fn recv_stamped(
    socket: &impl AsRawFd,
    buf: &mut [u8],
) -> std::io::Result<(usize, Option<Arrival>)> {
    /// Room for one `SCM_TIMESTAMPNS` message (a header and a timespec, 32
    /// bytes) with margin, aligned as the kernel's `cmsghdr` must be.
    #[repr(C, align(8))]
    struct Control([u8; 64]);
    let mut control = Control([0; 64]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut control.0),
        MsgFlags::empty(),
    )?;
    let stamp = msg.cmsgs().ok().and_then(|mut messages| {
        messages.find_map(|m| match m {
            ControlMessageOwned::ScmTimestampns(ts) => Some(Arrival(Duration::from(ts))),
            _ => None,
        })
    });
    Ok((msg.bytes, stamp))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn the_option_is_accepted_on_a_tcp_socket() {
        let socket = TcpListener::bind("127.0.0.1:0").unwrap();
        bind_address_no_port(&socket).unwrap();
    }

    /// A stamped read says when the bytes arrived, not when they were read:
    /// bytes left waiting 50 ms carry the earlier moment.
    #[test]
    fn a_stamp_is_the_arrival_not_the_read() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let reader = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut writer, _) = listener.accept().unwrap();
        stamp_arrivals(&reader).unwrap();
        let before = Instant::now();
        writer.write_all(b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
        let written = Instant::now();
        std::thread::sleep(Duration::from_millis(50));
        let mut buf = [0u8; 64];
        let (n, stamp) = recv_stamped(&reader, &mut buf).unwrap();
        let read = Instant::now();
        assert_eq!(&buf[..n], b"HTTP/1.1 200 OK\r\n\r\n");
        let at = stamp.and_then(Arrival::instant).expect("a stamp");
        // The wall and monotonic clocks are read a few µs apart; allow for it.
        let slack = Duration::from_millis(1);
        assert!(at + slack >= before && at <= written + slack, "{at:?}");
        assert!(read - at >= Duration::from_millis(45), "{:?}", read - at);
    }

    #[test]
    fn an_unstamped_socket_reads_without_a_stamp_and_the_end_has_none() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let reader = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut writer, _) = listener.accept().unwrap();
        writer.write_all(b"abc").unwrap();
        drop(writer);
        std::thread::sleep(Duration::from_millis(10));
        let mut buf = [0u8; 8];
        assert_eq!(recv_stamped(&reader, &mut buf).unwrap(), (3, None));
        stamp_arrivals(&reader).unwrap();
        assert_eq!(recv_stamped(&reader, &mut buf).unwrap(), (0, None));
    }
}
