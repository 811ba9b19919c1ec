//! Socket options and reads that tokio's `TcpSocket` does not expose.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::socket::setsockopt;
use nix::sys::socket::sockopt::{IpBindAddressNoPort, ReceiveTimestampns};
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
/// returns. With it, an answer's time does not depend on when the reader
/// got round to reading it, so a reader may read on its own schedule. The
/// kernel turns stamping on machine-wide in deferred work, so the first
/// segments after the first such socket may come unstamped: readers must
/// fall back to their own clock.
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
        Clocks::now()?.before(self)
    }
}

/// The wall clock and the monotonic clock, read together once for a batch
/// of stamps: converting each stamp against its own reading of both clocks
/// cost about 300 instructions an answer, and the open loop's ticks read
/// ten answers or more at once.
#[derive(Debug, Clone, Copy)]
pub struct Clocks {
    wall: Duration,
    mono: Instant,
}

impl Clocks {
    /// Both clocks now; `None` if the wall clock is before 1970.
    pub fn now() -> Option<Self> {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        Some(Self {
            wall,
            mono: Instant::now(),
        })
    }

    /// `stamp` on the monotonic clock, as [`Arrival::instant`] says. A
    /// stamp later than this reading (the segment arrived since) is
    /// converted against a fresh one, which also tells it from a stamp in
    /// the future.
    pub fn instant(&self, stamp: Arrival) -> Option<Instant> {
        match self.wall.checked_sub(stamp.0) {
            Some(ago) => self.mono.checked_sub(ago),
            None => stamp.instant(),
        }
    }

    /// `stamp` on the monotonic clock if it is no later than this reading.
    fn before(&self, stamp: Arrival) -> Option<Instant> {
        self.mono.checked_sub(self.wall.checked_sub(stamp.0)?)
    }
}

/// Reads like `read(2)` on a non-blocking socket, appending to `buf`'s
/// spare capacity (none is zeroed first: at tens of thousands of reads a
/// second, clearing a 2 KiB buffer before each would cost more than the
/// parse), and also says when the last segment read reached the machine,
/// if the socket stamps arrivals ([`stamp_arrivals`]). A read with no data
/// (the peer's FIN) has no stamp. `buf` must have spare room: a read into
/// none would look like the peer's FIN, so it is refused.
pub fn recv_stamped(
    socket: &impl AsRawFd,
    buf: &mut Vec<u8>,
) -> std::io::Result<(usize, Option<Arrival>)> {
    let (n, stamp) = recv_stamped_into(socket, buf.spare_capacity_mut())?;
    // SAFETY: the kernel initialised the first `n` bytes of the spare
    // capacity, which the read was bounded by.
    unsafe { buf.set_len(buf.len() + n) };
    Ok((n, stamp))
}

/// [`recv_stamped`] into any uninitialised room, such as the unfilled part
/// of tokio's `ReadBuf`: on success its first `n` bytes are initialised.
///
/// Written against `libc` rather than `nix`, whose `recvmsg` only takes
/// initialised buffers.
pub fn recv_stamped_into(
    socket: &impl AsRawFd,
    spare: &mut [MaybeUninit<u8>],
) -> std::io::Result<(usize, Option<Arrival>)> {
    /// Room for one `SCM_TIMESTAMPNS` message (a header and a timespec, 32
    /// bytes) with margin, aligned as the kernel's `cmsghdr` must be.
    #[repr(C, align(8))]
    struct Control([u8; 64]);
    let mut control = Control([0; 64]);
    if spare.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no room in the buffer to read into",
        ));
    }
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one (no name, no
    // buffers), filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len() as _;
    // SAFETY: every pointer in `msg` points into `spare` or `control`,
    // both live and exclusively borrowed for the call, with the lengths
    // given; the kernel writes at most that much into each.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, 0) };
    let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    let mut stamp = None;
    if msg.msg_flags & libc::MSG_CTRUNC == 0 {
        // SAFETY: `msg` was filled by the kernel, whose control length
        // bounds the walk; CMSG_DATA of an SCM_TIMESTAMPNS message holds a
        // timespec, read unaligned as the data need not be aligned for it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                    stamp = u64::try_from(ts.tv_sec)
                        .ok()
                        .zip(u32::try_from(ts.tv_nsec).ok())
                        .map(|(s, ns)| Arrival(Duration::new(s, ns)));
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
    }
    Ok((n, stamp))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// One reading of the clocks converts a batch of stamps as each
    /// stamp's own reading would: one taken before it, one that came
    /// after it (against a fresh reading), and none in the future.
    #[test]
    fn one_reading_converts_stamps_before_and_after_it() {
        let wall = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let earlier = Arrival(wall() - Duration::from_millis(30));
        let clocks = Clocks::now().unwrap();
        let at = clocks.instant(earlier).unwrap();
        let by_itself = earlier.instant().unwrap();
        let apart = if at > by_itself {
            at - by_itself
        } else {
            by_itself - at
        };
        assert!(apart < Duration::from_millis(5), "{apart:?}");
        assert!(at + Duration::from_millis(25) <= clocks.mono);
        std::thread::sleep(Duration::from_millis(20));
        let later = Arrival(wall());
        let at = clocks.instant(later).unwrap();
        assert!(
            at >= clocks.mono + Duration::from_millis(19),
            "{at:?} {clocks:?}"
        );
        assert!(at <= Instant::now());
        assert_eq!(
            clocks.instant(Arrival(wall() + Duration::from_secs(3600))),
            None
        );
    }

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
        // The kernel turns stamping on for the whole machine with the first
        // socket that asks, in deferred work: segments in the first moments
        // after may come unstamped (which readers fall back from).
        std::thread::sleep(Duration::from_millis(20));
        let before = Instant::now();
        writer.write_all(b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
        let written = Instant::now();
        std::thread::sleep(Duration::from_millis(50));
        let mut buf = b"kept".to_vec();
        buf.reserve(64);
        let (n, stamp) = recv_stamped(&reader, &mut buf).unwrap();
        let read = Instant::now();
        assert_eq!(n, 19);
        assert_eq!(buf, b"keptHTTP/1.1 200 OK\r\n\r\n", "appended");
        let at = stamp.and_then(Arrival::instant).expect("a stamp");
        // The wall and monotonic clocks are read a few µs apart; allow for it.
        let slack = Duration::from_millis(1);
        assert!(at + slack >= before && at <= written + slack, "{at:?}");
        assert!(read - at >= Duration::from_millis(45), "{:?}", read - at);
    }

    /// A read that finds nothing fails as `read(2)` would, and leaves the
    /// buffer as it was.
    #[test]
    fn nothing_to_read_is_would_block() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let reader = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _writer = listener.accept().unwrap();
        reader.set_nonblocking(true).unwrap();
        stamp_arrivals(&reader).unwrap();
        let mut buf = b"x".to_vec();
        buf.reserve(16);
        let err = recv_stamped(&reader, &mut buf).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
        assert_eq!(buf, b"x");
    }

    #[test]
    fn an_unstamped_socket_reads_without_a_stamp_and_the_end_has_none() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let reader = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut writer, _) = listener.accept().unwrap();
        writer.write_all(b"abc").unwrap();
        drop(writer);
        std::thread::sleep(Duration::from_millis(10));
        let mut buf = Vec::with_capacity(8);
        assert_eq!(recv_stamped(&reader, &mut buf).unwrap(), (3, None));
        assert_eq!(buf, b"abc");
        stamp_arrivals(&reader).unwrap();
        assert_eq!(recv_stamped(&reader, &mut buf).unwrap(), (0, None));
        assert_eq!(buf, b"abc");
    }
}
