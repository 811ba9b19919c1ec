//! Socket options that tokio's `TcpSocket` does not expose.

use std::os::fd::AsFd;

use nix::sys::socket::{setsockopt, sockopt::IpBindAddressNoPort};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_is_accepted_on_a_tcp_socket() {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        bind_address_no_port(&socket).unwrap();
    }
}
