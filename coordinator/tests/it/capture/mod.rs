//! A target that keeps every HTTP/1.1 request it is sent (method, path,
//! headers, body), so a test can check what the agents really put on the
//! wire. It answers each with an empty 200, after `slow` for paths under
//! `/slow`, on keep-alive connections, one thread per connection.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub method: String,
    pub path: String,
    /// Names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) struct Capture {
    pub addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Capture {
    pub(crate) fn start(slow: Duration) -> Capture {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the capture target");
        let addr = listener.local_addr().expect("addr").to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let all = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let all = all.clone();
                std::thread::spawn(move || serve(stream, &all, slow));
            }
        });
        Capture { addr, seen }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request kept so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("capture lock").clone()
    }
}

/// Serves one connection until the peer closes it or sends what is not
/// HTTP/1.1 with a Content-Length (or no body).
fn serve(stream: TcpStream, all: &Mutex<Vec<Seen>>, slow: Duration) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
            return;
        };
        let (method, path) = (method.to_string(), path.to_string());
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let is_slow = path.starts_with("/slow");
        all.lock().expect("capture lock").push(Seen {
            method,
            path,
            headers,
            body,
        });
        if is_slow {
            std::thread::sleep(slow);
        }
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}
