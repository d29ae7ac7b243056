//! The decision: which URLs and addresses the fetcher may reach. Pure functions, no I/O.
//!
//! A URL passes when its scheme is `http` or `https`, it carries no credentials, and its host is
//! either a name (checked again after resolution, address by address) or an address outside every
//! reserved range. The URL parser has already turned every spelling of an IPv4 literal (decimal
//! `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`, short `127.1`) into one address; IPv6
//! addresses that embed an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by the
//! address they embed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::IpNet;
use url::{Host, Url};

/// Why an address is not an ordinary public one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Range {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, local-use NAT64 `64:ff9b:1::/48`.
    Private,
    /// Carrier-grade NAT, `100.64.0.0/10`.
    SharedCgnat,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// A cloud provider's instance-metadata endpoint (`169.254.169.254`, `fd00:ec2::254`…).
    Metadata,
    /// `198.18.0.0/15`, `2001:2::/48`.
    Benchmarking,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `fc00::/7`.
    UniqueLocal,
    /// Everything else set aside: `240/4`, `192.0.0/24`, `192.88.99/24`, IETF protocol
    /// assignments `2001::/23` (Teredo included), site-local `fec0::/10`, discard `100::/64`,
    /// deprecated IPv4-compatible addresses, and all IPv6 outside `2000::/3`.
    Reserved,
}

impl Range {
    /// The range's name as a noun phrase ("a loopback address").
    pub fn describe(self) -> &'static str {
        match self {
            Range::Unspecified => "an unspecified address",
            Range::Loopback => "a loopback address",
            Range::Private => "a private-network address",
            Range::SharedCgnat => "a carrier-grade NAT address",
            Range::LinkLocal => "a link-local address",
            Range::Metadata => "a cloud metadata endpoint",
            Range::Benchmarking => "a benchmarking address",
            Range::Documentation => "a documentation address",
            Range::Multicast => "a multicast address",
            Range::Broadcast => "the broadcast address",
            Range::UniqueLocal => "a unique-local IPv6 address",
            Range::Reserved => "a reserved address",
        }
    }
}

/// Exact addresses of instance-metadata services (AWS, GCP, Azure, OpenStack, Oracle,
/// DigitalOcean: `169.254.169.254`; AWS ECS and EKS credentials; Tencent; Alibaba; Azure's
/// WireServer, a public address; AWS over IPv6).
const METADATA: [IpAddr; 8] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 2)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 23)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 0, 23)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0023)),
];

/// The class of an address: `None` for an ordinary public address, else the range it falls in.
/// For IPv6 forms that embed an IPv4 address, the second value is that address.
pub fn classify(ip: IpAddr) -> (Option<Range>, Option<Ipv4Addr>) {
    if METADATA.contains(&ip) {
        return (Some(Range::Metadata), None);
    }
    match ip {
        IpAddr::V4(v4) => (classify_v4(v4), None),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some((v4, _)) if METADATA.contains(&IpAddr::V4(v4)) => (Some(Range::Metadata), Some(v4)),
            Some((v4, Embedding::Compatible)) => (Some(classify_v4(v4).unwrap_or(Range::Reserved)), Some(v4)),
            Some((v4, _)) => (classify_v4(v4), Some(v4)),
            None => (classify_v6(v6), None),
        },
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Range> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, ..) => Range::Unspecified,
        (127, ..) => Range::Loopback,
        (10, ..) | (172, 16..=31, _) | (192, 168, _) => Range::Private,
        (100, 64..=127, _) => Range::SharedCgnat,
        (169, 254, _) => Range::LinkLocal,
        (198, 18..=19, _) => Range::Benchmarking,
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Range::Documentation,
        (224..=239, ..) => Range::Multicast,
        _ if ip == Ipv4Addr::BROADCAST => Range::Broadcast,
        (240..=255, ..) | (192, 0, 0) | (192, 88, 99) => Range::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Range> {
    let s = ip.segments();
    Some(if ip.is_unspecified() {
        Range::Unspecified
    } else if ip.is_loopback() {
        Range::Loopback
    } else if s[0] & 0xff00 == 0xff00 {
        Range::Multicast
    } else if s[0] & 0xffc0 == 0xfe80 {
        Range::LinkLocal
    } else if s[0] & 0xfe00 == 0xfc00 {
        Range::UniqueLocal
    } else if s[0] == 0x0064 && s[1] == 0xff9b && s[2] == 0x0001 {
        Range::Private
    } else if s[0] == 0x2001 && s[1] == 0x0db8 || s[0] == 0x3fff && s[1] < 0x1000 {
        Range::Documentation
    } else if s[0] == 0x2001 && s[1] == 0x0002 && s[2] == 0 {
        Range::Benchmarking
    } else if s[0] & 0xe000 != 0x2000 || s[0] == 0x2001 && s[1] < 0x0200 {
        // Outside global unicast, or IETF protocol assignments (Teredo, ORCHID, AMT…).
        Range::Reserved
    } else {
        return None;
    })
}

/// How an IPv6 address carries an IPv4 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Embedding {
    /// `::ffff:a.b.c.d`.
    Mapped,
    /// `::a.b.c.d` (deprecated; never an ordinary destination).
    Compatible,
    /// `64:ff9b::a.b.c.d`.
    Nat64,
    /// `2002:AABB:CCDD::/48`.
    SixToFour,
}

fn embedded_v4(ip: Ipv6Addr) -> Option<(Ipv4Addr, Embedding)> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..5] == [0; 5] && s[5] == 0xffff {
        Some((low, Embedding::Mapped))
    } else if s[..6] == [0; 6] && !ip.is_unspecified() && !ip.is_loopback() {
        Some((low, Embedding::Compatible))
    } else if s[0] == 0x0064 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        Some((low, Embedding::Nat64))
    } else if s[0] == 0x2002 {
        Some((
            Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8),
            Embedding::SixToFour,
        ))
    } else {
        None
    }
}

/// Hosts and networks a self-hoster lets the fetcher reach although they are not public.
///
/// Entries: a host name (`searxng.internal`), a wildcard for a domain's subdomains
/// (`*.corp.example`), an address (`10.0.0.5`, `::1`, `[fd00::7]`) or a network in CIDR form
/// (`10.0.0.0/8`). Empty by default. A cloud metadata endpoint is reachable only when its exact
/// address is listed: no network and no host name ever covers one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    hosts: Vec<String>,
    addresses: Vec<IpAddr>,
    networks: Vec<IpNet>,
}

/// An allow-list entry that is neither a host name, an address nor a network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{entry}` is not a host name, an IP address or a CIDR network ({reason})")]
pub struct BadAllowEntry {
    /// The entry as given.
    pub entry: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl AllowList {
    /// Parses entries, each trimmed; empty entries are skipped.
    ///
    /// # Errors
    ///
    /// The first entry that is not a host name, an address or a network.
    pub fn parse<S: AsRef<str>>(entries: impl IntoIterator<Item = S>) -> Result<Self, BadAllowEntry> {
        let mut list = AllowList::default();
        for entry in entries {
            list.add(entry.as_ref())?;
        }
        Ok(list)
    }

    /// Adds one entry.
    ///
    /// # Errors
    ///
    /// The entry is not a host name, an address or a network.
    pub fn add(&mut self, entry: &str) -> Result<(), BadAllowEntry> {
        let bad = |reason| BadAllowEntry { entry: entry.to_owned(), reason };
        let trimmed = entry.trim();
        if trimmed.is_empty() {
            return Ok(());
        }
        let bare = trimmed.strip_prefix('[').and_then(|s| s.strip_suffix(']')).unwrap_or(trimmed);
        if let Ok(ip) = IpAddr::from_str(bare) {
            self.addresses.push(ip);
        } else if bare.contains('/') {
            let net = IpNet::from_str(bare).map_err(|_| bad("a network is ADDRESS/PREFIX"))?;
            self.networks.push(net.trunc());
        } else {
            let name = bare.trim_end_matches('.').to_ascii_lowercase();
            let labels = name.strip_prefix("*.").unwrap_or(&name);
            let valid = !labels.is_empty()
                && labels.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                });
            if !valid {
                return Err(bad(
                    "a host name is letters, digits, dots, dashes and underscores, optionally after `*.`",
                ));
            }
            self.hosts.push(name);
        }
        Ok(())
    }

    /// Whether nothing is allowed beyond public addresses.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.addresses.is_empty() && self.networks.is_empty()
    }

    /// Whether the host name is listed (exactly, or under a `*.` wildcard).
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.iter().any(|entry| match entry.strip_prefix("*.") {
            Some(domain) => host.strip_suffix(domain).is_some_and(|rest| rest.ends_with('.')),
            None => *entry == host,
        })
    }

    fn allows_address(&self, ip: IpAddr, range: Range, via_host: bool) -> bool {
        if self.addresses.contains(&ip) {
            return true;
        }
        range != Range::Metadata && (via_host || self.networks.iter().any(|net| net.contains(&ip)))
    }
}

/// Why a URL or an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Blocked {
    /// Only `http` and `https` are fetched.
    #[error("`{scheme}:` URLs are not fetched; only http and https are")]
    Scheme {
        /// The scheme given.
        scheme: String,
    },
    /// A user name or password in the URL.
    #[error("URLs with a user name or password are refused; credentials never travel in a URL")]
    Credentials,
    /// No host to connect to.
    #[error("the URL has no host")]
    NoHost,
    /// The address is in a reserved range.
    #[error("{}", describe_blocked(host.as_deref(), *ip, *embedded, *range, hint))]
    Address {
        /// The host name that resolved to it, when there was one.
        host: Option<String>,
        /// The address.
        ip: IpAddr,
        /// The IPv4 address an IPv6 address embeds, when that decided.
        embedded: Option<Ipv4Addr>,
        /// Its range.
        range: Range,
        /// Where an operator allows it.
        hint: String,
    },
    /// The name did not resolve.
    #[error("{host} could not be resolved: {reason}")]
    Unresolved {
        /// The host name.
        host: String,
        /// The resolver's error.
        reason: String,
    },
}

fn describe_blocked(
    host: Option<&str>,
    ip: IpAddr,
    embedded: Option<Ipv4Addr>,
    range: Range,
    hint: &str,
) -> String {
    // A name's address is not printed: it would map the internal network for whoever asked.
    let subject = match host {
        Some(host) => format!("{host} resolves to"),
        None => format!("{ip} is"),
    };
    let what = match (embedded, host) {
        (Some(v4), None) => format!("an IPv6 form of {v4}, {}", range.describe()),
        (Some(_), Some(_)) => format!("an IPv6 form of {}", range.describe()),
        (None, _) => range.describe().to_owned(),
    };
    let allow = if range == Range::Metadata {
        format!("it is reachable only when its exact address is listed in {hint}")
    } else {
        format!("to allow it, add it to {hint}")
    };
    format!("{subject} {what}; the fetcher only connects to public addresses ({allow})")
}

/// The decision for a URL before any name is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The host is an allowed address.
    Address(IpAddr),
    /// The host is a name: each address it resolves to must pass [`Policy::check_address`].
    Name(String),
}

/// Where an operator allows more, named in every refusal; set by the front end.
const DEFAULT_HINT: &str = "the fetcher's allow-list";

/// Which destinations are reachable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    allow: AllowList,
    hint: String,
}

impl Default for Policy {
    fn default() -> Self {
        Self::new(AllowList::default())
    }
}

impl Policy {
    /// Public addresses, plus what `allow` names.
    pub fn new(allow: AllowList) -> Self {
        Self { allow, hint: DEFAULT_HINT.to_owned() }
    }

    /// Names the setting where an operator allows more (`the server's --fetch-allow`), quoted in
    /// every refusal so a model, or a person reading its transcript, knows where to look.
    #[must_use]
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = hint.into();
        self
    }

    /// The allow-list.
    pub fn allow_list(&self) -> &AllowList {
        &self.allow
    }

    /// Adds an entry to the allow-list (for an endpoint the operator configured).
    ///
    /// # Errors
    ///
    /// The entry is not a host name, an address or a network.
    pub fn allow(&mut self, entry: &str) -> Result<(), BadAllowEntry> {
        self.allow.add(entry)
    }

    /// Checks a URL: scheme, credentials, and the host when it is an address.
    ///
    /// # Errors
    ///
    /// [`Blocked`] with the reason.
    pub fn check_url(&self, url: &Url) -> Result<Target, Blocked> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Blocked::Scheme { scheme: url.scheme().to_owned() });
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Blocked::Credentials);
        }
        match url.host() {
            None => Err(Blocked::NoHost),
            Some(Host::Ipv4(v4)) => self.check_address(None, IpAddr::V4(v4)).map(Target::Address),
            Some(Host::Ipv6(v6)) => self.check_address(None, IpAddr::V6(v6)).map(Target::Address),
            Some(Host::Domain(name)) => match IpAddr::from_str(name) {
                // Only non-special schemes leave literals as names; http(s) never do.
                Ok(ip) => self.check_address(None, ip).map(Target::Address),
                Err(_) => Ok(Target::Name(name.to_owned())),
            },
        }
    }

    /// Checks one address, reached directly (`host` is `None`) or through a host name.
    ///
    /// # Errors
    ///
    /// [`Blocked::Address`] when it is reserved and not allowed.
    pub fn check_address(&self, host: Option<&str>, ip: IpAddr) -> Result<IpAddr, Blocked> {
        let (range, embedded) = classify(ip);
        let Some(range) = range else { return Ok(ip) };
        let via_host = host.is_some_and(|h| self.allow.allows_host(h));
        if self.allow.allows_address(ip, range, via_host)
            || embedded.is_some_and(|v4| self.allow.allows_address(IpAddr::V4(v4), range, via_host))
        {
            return Ok(ip);
        }
        Err(Blocked::Address { host: host.map(str::to_owned), ip, embedded, range, hint: self.hint.clone() })
    }

    /// Keeps the allowed addresses a name resolved to.
    ///
    /// # Errors
    ///
    /// The first refusal when none is allowed; [`Blocked::Unresolved`] when there were none.
    pub fn filter_addresses(&self, host: &str, addresses: &[IpAddr]) -> Result<Vec<IpAddr>, Blocked> {
        let mut first = None;
        let mut allowed = Vec::with_capacity(addresses.len());
        for &ip in addresses {
            match self.check_address(Some(host), ip) {
                Ok(ip) => allowed.push(ip),
                Err(blocked) => {
                    first.get_or_insert(blocked);
                }
            }
        }
        match (allowed.is_empty(), first) {
            (false, _) => Ok(allowed),
            (true, Some(blocked)) => Err(blocked),
            (true, None) => {
                Err(Blocked::Unresolved { host: host.to_owned(), reason: "no addresses".to_owned() })
            }
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Address(ip) => write!(f, "{ip}"),
            Target::Name(name) => f.write_str(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_verdict(policy: &Policy, url: &str) -> Result<Target, Blocked> {
        policy.check_url(&Url::parse(url).unwrap())
    }

    fn range_of(url: &str) -> Range {
        match url_verdict(&Policy::default(), url) {
            Err(Blocked::Address { range, .. }) => range,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn every_spelling_of_loopback_is_caught() {
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://0x7f000001/",
            "http://127.1/",
            "http://127.0.1/",
            "http://017700000001/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[0:0:0:0:0:ffff:127.0.0.1]/",
            "http://[64:ff9b::127.0.0.1]/",
            "http://[2002:7f00:0001::]/",
            "HTTP://127.0.0.1:8080/",
            "http://127.255.255.254/",
        ] {
            assert_eq!(range_of(url), Range::Loopback, "{url}");
        }
        assert_eq!(range_of("http://[::127.0.0.1]/"), Range::Loopback, "IPv4-compatible");
    }

    #[test]
    fn every_reserved_range_is_named() {
        let cases = [
            ("http://0.0.0.0/", Range::Unspecified),
            ("http://0/", Range::Unspecified),
            ("http://[::]/", Range::Unspecified),
            ("http://10.1.2.3/", Range::Private),
            ("http://172.16.0.1/", Range::Private),
            ("http://172.31.255.255/", Range::Private),
            ("http://192.168.1.1/", Range::Private),
            ("http://[64:ff9b:1::1]/", Range::Private),
            ("http://100.64.0.1/", Range::SharedCgnat),
            ("http://100.127.255.255/", Range::SharedCgnat),
            ("http://169.254.1.1/", Range::LinkLocal),
            ("http://[fe80::1]/", Range::LinkLocal),
            ("http://169.254.169.254/", Range::Metadata),
            ("http://2852039166/", Range::Metadata),
            ("http://169.254.170.2/", Range::Metadata),
            ("http://100.100.100.200/", Range::Metadata),
            ("http://[fd00:ec2::254]/", Range::Metadata),
            ("http://[::ffff:169.254.169.254]/", Range::Metadata),
            ("http://[64:ff9b::a9fe:a9fe]/", Range::Metadata),
            ("http://[::169.254.169.254]/", Range::Metadata),
            ("http://[2002:a9fe:a9fe::]/", Range::Metadata),
            ("http://168.63.129.16/", Range::Metadata),
            ("http://169.254.0.23/", Range::Metadata),
            ("http://198.18.0.1/", Range::Benchmarking),
            ("http://198.19.255.1/", Range::Benchmarking),
            ("http://[2001:2::1]/", Range::Benchmarking),
            ("http://192.0.2.1/", Range::Documentation),
            ("http://198.51.100.7/", Range::Documentation),
            ("http://203.0.113.9/", Range::Documentation),
            ("http://[2001:db8::1]/", Range::Documentation),
            ("http://[3fff::1]/", Range::Documentation),
            ("http://224.0.0.1/", Range::Multicast),
            ("http://239.255.255.250/", Range::Multicast),
            ("http://[ff02::1]/", Range::Multicast),
            ("http://255.255.255.255/", Range::Broadcast),
            ("http://[fc00::1]/", Range::UniqueLocal),
            ("http://[fd12:3456::1]/", Range::UniqueLocal),
            ("http://240.0.0.1/", Range::Reserved),
            ("http://192.0.0.8/", Range::Reserved),
            ("http://192.88.99.1/", Range::Reserved),
            ("http://[2001::1]/", Range::Reserved),
            ("http://[fec0::1]/", Range::Reserved),
            ("http://[100::1]/", Range::Reserved),
            ("http://[4000::1]/", Range::Reserved),
            ("http://[::8.8.8.8]/", Range::Reserved),
            ("http://[2002:0a00:0001::1]/", Range::Private),
            ("http://[::ffff:10.0.0.1]/", Range::Private),
            ("http://[64:ff9b::192.168.0.1]/", Range::Private),
        ];
        for (url, range) in cases {
            assert_eq!(range_of(url), range, "{url}");
        }
    }

    #[test]
    fn public_addresses_and_names_pass() {
        let policy = Policy::default();
        for url in [
            "http://8.8.8.8/",
            "https://1.1.1.1/dns-query",
            "http://[2606:4700:4700::1111]/",
            "http://[::ffff:8.8.8.8]/",
            "http://[64:ff9b::8.8.8.8]/",
            "http://[2002:0808:0808::1]/",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
            "http://169.253.0.1/",
            "http://198.20.0.1/",
        ] {
            assert!(matches!(url_verdict(&policy, url), Ok(Target::Address(_))), "{url}");
        }
        assert_eq!(
            url_verdict(&policy, "https://example.com/a").unwrap(),
            Target::Name("example.com".into())
        );
    }

    #[test]
    fn schemes_credentials_and_hostless_urls_are_refused() {
        let policy = Policy::default();
        for url in ["file:///etc/passwd", "gopher://example.com/", "ftp://example.com/", "data:text/plain,hi"]
        {
            assert!(matches!(url_verdict(&policy, url), Err(Blocked::Scheme { .. })), "{url}");
        }
        for url in ["http://user@example.com/", "http://user:pw@example.com/", "http://:pw@example.com/"] {
            assert_eq!(url_verdict(&policy, url), Err(Blocked::Credentials), "{url}");
        }
    }

    #[test]
    fn refusals_say_why_and_where_to_allow() {
        let policy = Policy::default().with_hint("the server's --fetch-allow setting");
        let message = url_verdict(&policy, "http://127.0.0.1/").unwrap_err().to_string();
        assert_eq!(
            message,
            "127.0.0.1 is a loopback address; the fetcher only connects to public addresses \
             (to allow it, add it to the server's --fetch-allow setting)"
        );
        let message =
            policy.filter_addresses("metadata.google.internal", &[METADATA[0]]).unwrap_err().to_string();
        assert!(
            message.starts_with("metadata.google.internal resolves to a cloud metadata endpoint"),
            "{message}"
        );
        assert!(!message.contains("169.254"), "a name's address is not printed: {message}");
        assert!(message.contains("only when its exact address is listed"), "{message}");
        let message = url_verdict(&policy, "http://[::ffff:10.0.0.1]/").unwrap_err().to_string();
        assert!(
            message.starts_with("::ffff:10.0.0.1 is an IPv6 form of 10.0.0.1, a private-network address"),
            "{message}"
        );
    }

    #[test]
    fn the_allow_list_opens_what_it_names_and_never_metadata_by_accident() {
        let allow =
            AllowList::parse(["10.0.0.0/8", "searxng.internal", "*.corp.example", "[::1]", " "]).unwrap();
        let policy = Policy::new(allow);
        assert!(url_verdict(&policy, "http://10.9.8.7/").is_ok());
        assert!(url_verdict(&policy, "http://[::ffff:10.9.8.7]/").is_ok(), "the embedded address counts");
        assert!(url_verdict(&policy, "http://[::1]:8080/").is_ok());
        assert!(url_verdict(&policy, "http://127.0.0.1/").is_err(), "::1 does not open 127.0.0.1");
        assert!(url_verdict(&policy, "http://192.168.0.1/").is_err());
        let private = IpAddr::from([192, 168, 5, 5]);
        assert_eq!(policy.filter_addresses("searxng.internal", &[private]).unwrap(), vec![private]);
        assert_eq!(policy.filter_addresses("SearXNG.Internal.", &[private]).unwrap(), vec![private]);
        assert!(policy.filter_addresses("a.corp.example", &[private]).is_ok());
        assert!(
            policy.filter_addresses("corp.example", &[private]).is_err(),
            "the wildcard is for subdomains"
        );
        assert!(policy.filter_addresses("evilcorp.example", &[private]).is_err());
        assert!(policy.filter_addresses("other.internal", &[private]).is_err());
        // A network or a host name never covers a metadata endpoint.
        let wide =
            Policy::new(AllowList::parse(["169.254.0.0/16", "0.0.0.0/0", "::/0", "meta.internal"]).unwrap());
        for metadata in [
            "http://169.254.169.254/",
            "http://[::169.254.169.254]/",
            "http://[::ffff:169.254.169.254]/",
            "http://[fd00:ec2::254]/",
            "http://168.63.129.16/",
        ] {
            assert!(url_verdict(&wide, metadata).is_err(), "{metadata}");
        }
        assert!(url_verdict(&wide, "http://169.254.1.1/").is_ok());
        assert!(wide.filter_addresses("meta.internal", &[METADATA[0]]).is_err());
        let exact = Policy::new(AllowList::parse(["169.254.169.254"]).unwrap());
        assert!(url_verdict(&exact, "http://169.254.169.254/latest/meta-data/").is_ok());
        assert!(url_verdict(&exact, "http://169.254.170.2/").is_err());
    }

    #[test]
    fn a_name_keeps_only_its_allowed_addresses() {
        let policy = Policy::default();
        let public = IpAddr::from([93, 184, 215, 14]);
        let kept = policy.filter_addresses("mixed.example", &[IpAddr::from([127, 0, 0, 1]), public]).unwrap();
        assert_eq!(kept, vec![public]);
        assert!(matches!(policy.filter_addresses("none.example", &[]), Err(Blocked::Unresolved { .. })));
    }

    #[test]
    fn bad_allow_entries_are_refused() {
        assert!(AllowList::parse(["searxng_app", "my_service.internal"]).is_ok(), "container names");
        for entry in ["10.0.0.0/33", "http://x", "a b", "*.", "x..y", "10.0.0.0/x"] {
            assert!(AllowList::parse([entry]).is_err(), "{entry}");
        }
        assert!(AllowList::parse(Vec::<String>::new()).unwrap().is_empty());
    }
}
