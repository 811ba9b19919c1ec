//! Stamped reads into tokio's `ReadBuf`, so that an `AsyncRead` built on
//! them needs no `unsafe` of its own.

use std::os::fd::AsRawFd;

use tokio::io::ReadBuf;

use crate::{recv_stamped_into, Arrival};

/// [`recv_stamped`](crate::recv_stamped) into the unfilled part of `buf`,
/// which is then filled by the bytes read: the read's size and, if the
/// socket stamps arrivals, when its last segment reached the machine.
/// Nothing is zeroed before the read, and a full `buf` is refused as
/// [`recv_stamped_into`] refuses no room.
pub fn recv_stamped_buf(
    socket: &impl AsRawFd,
    buf: &mut ReadBuf<'_>,
) -> std::io::Result<(usize, Option<Arrival>)> {
    // SAFETY: the read only writes into the unfilled part, never
    // de-initialising any of it.
    let unfilled = unsafe { buf.unfilled_mut() };
    let (n, stamp) = recv_stamped_into(socket, unfilled)?;
    // SAFETY: the kernel initialised the first `n` bytes of the unfilled
    // part, which bounded the read.
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Ok((n, stamp))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::mem::MaybeUninit;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use super::*;
    use crate::stamp_arrivals;

    /// The bytes read are appended to what `buf` held, the stamp comes
    /// with them, and a full buffer is refused rather than read as the
    /// peer's FIN.
    #[test]
    fn a_read_fills_the_buffer_after_what_it_held() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let reader = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut writer, _) = listener.accept().unwrap();
        stamp_arrivals(&reader).unwrap();
        // Stamping is switched on machine-wide in deferred work.
        std::thread::sleep(Duration::from_millis(20));
        writer.write_all(b"abc").unwrap();
        std::thread::sleep(Duration::from_millis(10));
        let mut room = [MaybeUninit::<u8>::uninit(); 8];
        let mut buf = ReadBuf::uninit(&mut room);
        buf.put_slice(b"xy");
        let (n, stamp) = recv_stamped_buf(&reader, &mut buf).unwrap();
        assert_eq!(n, 3);
        assert_eq!(buf.filled(), b"xyabc");
        assert!(stamp.and_then(Arrival::instant).is_some(), "a stamp");

        let mut full = [MaybeUninit::<u8>::uninit(); 1];
        let mut buf = ReadBuf::uninit(&mut full);
        buf.put_slice(b"z");
        let err = recv_stamped_buf(&reader, &mut buf).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(buf.filled(), b"z");
    }
}
