//! An SMTP sink on loopback (a thread per connection): it speaks enough of RFC 5321 for a real
//! client (EHLO, MAIL, RCPT, DATA with dot-unstuffing, RSET, NOOP, QUIT) and keeps every message
//! it accepts, so a test reads exactly what was sent.

use std::io::{BufRead as _, BufReader, Write as _};
use std::sync::{Arc, Mutex};

/// One message as it was accepted.
#[derive(Debug, Clone)]
pub struct Mail {
    /// The envelope's sender.
    pub from: String,
    /// The envelope's recipients.
    pub to: Vec<String>,
    /// The message: headers and body, dot-unstuffed, with CRLF line ends.
    pub data: String,
}

/// The sink: its port and the messages it took.
#[derive(Debug, Clone)]
pub struct SmtpSink {
    port: u16,
    mails: Arc<Mutex<Vec<Mail>>>,
}

impl SmtpSink {
    /// Starts one on a free loopback port.
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let mails = Arc::new(Mutex::new(Vec::new()));
        let kept = mails.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let kept = kept.clone();
                std::thread::spawn(move || converse(stream, &kept));
            }
        });
        Self { port, mails }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `smtp://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// The messages accepted so far.
    pub fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn converse(stream: std::net::TcpStream, kept: &Mutex<Vec<Mail>>) {
    let Ok(mut out) = stream.try_clone() else { return };
    let mut lines = BufReader::new(stream);
    let mut say = |text: &str| out.write_all(format!("{text}\r\n").as_bytes()).is_ok();
    if !say("220 sink ESMTP") {
        return;
    }
    let (mut from, mut to) = (String::new(), Vec::new());
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let command = line.trim_end().to_owned();
        let verb = command.split_whitespace().next().unwrap_or_default().to_ascii_uppercase();
        let address = || command.split_once(':').map(|(_, a)| a.trim().trim_matches(['<', '>']).to_owned());
        let ok = match verb.as_str() {
            "EHLO" => say("250-sink") && say("250-8BITMIME") && say("250 SMTPUTF8"),
            "HELO" => say("250 sink"),
            "MAIL" => {
                from = address().unwrap_or_default();
                to.clear();
                say("250 OK")
            }
            "RCPT" => {
                to.push(address().unwrap_or_default());
                say("250 OK")
            }
            "DATA" => {
                if !say("354 end with <CRLF>.<CRLF>") {
                    return;
                }
                let mut data = String::new();
                loop {
                    line.clear();
                    if lines.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == ".\r\n" || line == ".\n" {
                        break;
                    }
                    data.push_str(line.strip_prefix('.').filter(|_| line.starts_with("..")).unwrap_or(&line));
                }
                kept.lock().unwrap_or_else(|p| p.into_inner()).push(Mail {
                    from: std::mem::take(&mut from),
                    to: std::mem::take(&mut to),
                    data,
                });
                say("250 OK queued")
            }
            "RSET" => {
                from.clear();
                to.clear();
                say("250 OK")
            }
            "NOOP" => say("250 OK"),
            "QUIT" => {
                say("221 bye");
                return;
            }
            _ => say("502 not implemented"),
        };
        if !ok {
            return;
        }
    }
}
