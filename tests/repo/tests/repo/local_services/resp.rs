//! Just enough of RESP, Redis's protocol, over a `TcpStream` to ask the local Redis what a
//! client would: this package takes no Redis client for one test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// A connection that sends one command at a time and reads its one reply.
struct Connection(BufReader<TcpStream>);

impl Connection {
    fn open(port: u16) -> Connection {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("127.0.0.1:{port}: {e}"));
        stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        Connection(BufReader::new(stream))
    }

    /// `args` as a command; the reply's text (a simple string or a bulk string, `None` for a
    /// nil), or an error reply's.
    fn call(&mut self, args: &[&str]) -> Result<Option<String>, String> {
        let mut command = format!("*{}\r\n", args.len());
        for arg in args {
            command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.0.get_mut().write_all(command.as_bytes()).unwrap();
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        let (kind, rest) = line.trim_end().split_at(1);
        match kind {
            "+" => Ok(Some(rest.to_owned())),
            "-" => Err(rest.to_owned()),
            "$" if rest == "-1" => Ok(None),
            "$" => {
                let mut bulk = vec![0; rest.parse::<usize>().unwrap() + 2];
                self.0.read_exact(&mut bulk).unwrap();
                bulk.truncate(bulk.len() - 2);
                Ok(Some(String::from_utf8(bulk).unwrap()))
            }
            _ => panic!("a reply RESP does not have here: {line:?}"),
        }
    }
}

/// The local Redis on `port`, whose URL `redis.sh url` gave as `url`
/// (`redis://USER:PASSWORD@127.0.0.1:PORT`), refuses a client without the password and serves
/// one with it.
pub(super) fn serves_only_with_the_password(url: &str, port: u16) {
    let credentials = url.strip_prefix("redis://").and_then(|rest| rest.strip_suffix(&format!("@127.0.0.1:{port}")));
    let (user, password) = credentials.and_then(|c| c.split_once(':')).unwrap_or_else(|| panic!("{url}"));
    let refused = Connection::open(port).call(&["GET", "two-ports"]);
    assert!(refused.as_ref().is_err_and(|e| e.starts_with("NOAUTH")), "a client without the password: {refused:?}");
    let mut client = Connection::open(port);
    assert_eq!(client.call(&["AUTH", user, password]), Ok(Some("OK".to_owned())));
    assert_eq!(client.call(&["SET", "two-ports", "b"]), Ok(Some("OK".to_owned())));
    assert_eq!(client.call(&["GET", "two-ports"]), Ok(Some("b".to_owned())));
}
