//! Which network addresses the platform's outgoing requests may reach: an [`AddressPolicy`]
//! keeps the runs of a shared platform (their fetches on agents, their webhook sinks on hubs)
//! off the machines' own networks (loopback, link-local — cloud metadata lives at
//! 169.254.169.254 —, RFC 1918, CGNAT, ULA, unspecified, multicast) unless an admin allowed a
//! range. `silk crawl` on one's own machine has no policy and reaches anything.
//!
//! The check happens where the connection is made: an HTTP client under a policy resolves
//! names with `GuardedResolver` (feature `http`), which hands the client only the addresses
//! it checked — the client connects to one of them, with no second lookup, so a name that
//! resolves to a public address when checked and to a private one a moment later (DNS
//! rebinding) cannot slip through. An IP literal in a URL or a proxy is checked before
//! anything is sent ([`check_literal`]); a client that follows redirects checks each target
//! (`guard_client`). The fetcher does not follow redirects: each target is a request of its
//! own and goes through the same checks.

pub use ipnet::IpNet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
#[cfg(feature = "http")]
use std::{net::SocketAddr, sync::Arc};

/// The ranges a run under a policy may not reach unless allowed: unspecified and "this
/// network", RFC 1918, CGNAT (RFC 6598), loopback, link-local, IETF protocol assignments,
/// benchmarking, multicast, reserved and broadcast; IPv6 unspecified, loopback, local-use
/// NAT64 (RFC 8215), ULA, link-local, the old site-local, multicast. IPv6 forms that embed an IPv4 address
/// (IPv4-mapped and -compatible, NAT64, 6to4) are judged by that address.
const SPECIAL_V4: &[(Ipv4Addr, u8)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8),
    (Ipv4Addr::new(10, 0, 0, 0), 8),
    (Ipv4Addr::new(100, 64, 0, 0), 10),
    (Ipv4Addr::new(127, 0, 0, 0), 8),
    (Ipv4Addr::new(169, 254, 0, 0), 16),
    (Ipv4Addr::new(172, 16, 0, 0), 12),
    (Ipv4Addr::new(192, 0, 0, 0), 24),
    (Ipv4Addr::new(192, 168, 0, 0), 16),
    (Ipv4Addr::new(198, 18, 0, 0), 15),
    (Ipv4Addr::new(224, 0, 0, 0), 4),
    (Ipv4Addr::new(240, 0, 0, 0), 4),
];

const SPECIAL_V6: &[(Ipv6Addr, u8)] = &[
    (Ipv6Addr::UNSPECIFIED, 128),
    (Ipv6Addr::LOCALHOST, 128),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),
];

fn in_v4(ip: Ipv4Addr, (net, len): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

fn in_v6(ip: Ipv6Addr, (net, len): (Ipv6Addr, u8)) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    u128::from(ip) & mask == u128::from(net) & mask
}

/// The IPv4 address an IPv6 address stands for, if it embeds one: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, not `::` or `::1`), NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002:AABB:CCDD::/48`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low = Ipv4Addr::from(bits as u32);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if bits >> 32 == 0 && bits > 1 {
        return Some(low);
    }
    if in_v6(ip, (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96)) {
        return Some(low);
    }
    if in_v6(ip, (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16)) {
        return Some(Ipv4Addr::from((bits >> 80) as u32));
    }
    None
}

/// Whether `ip` is in one of the special ranges (see the module docs).
pub fn is_special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => SPECIAL_V4.iter().any(|&r| in_v4(v4, r)),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => is_special(IpAddr::V4(v4)),
            None => SPECIAL_V6.iter().any(|&r| in_v6(v6, r)),
        },
    }
}

/// An address range as people write it: a CIDR (`10.1.0.0/16`, `fd00::/8`) or one address
/// (`10.1.2.3`, a /32 or /128); `None` for anything else.
pub fn parse_range(text: &str) -> Option<IpNet> {
    let text = text.trim();
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

/// Which addresses the fetches of a run may reach: anything but the special ranges, and of
/// those only what `allow` lists (e.g. `127.0.0.0/8` for a test site, `10.1.0.0/16` for an
/// intranet an admin opened to a pool). `0.0.0.0/0` and `::/0` allow everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddressPolicy {
    allow: Vec<IpNet>,
}

impl AddressPolicy {
    /// Special ranges denied except those in `allow`.
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self { allow }
    }

    /// The ranges allowed although special.
    pub fn allowed(&self) -> &[IpNet] {
        &self.allow
    }

    /// This policy with `more` ranges allowed as well (e.g. an agent's own ranges and those
    /// an admin granted the tenant of one run).
    pub fn widened(&self, more: &[IpNet]) -> Self {
        let mut allow = self.allow.clone();
        for net in more {
            if !allow.contains(net) {
                allow.push(*net);
            }
        }
        Self { allow }
    }

    /// Whether `ip` may be reached.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let allowed = |ip: IpAddr| self.allow.iter().any(|n| n.contains(&ip));
        if allowed(ip) {
            return true;
        }
        if let IpAddr::V6(v6) = ip
            && let Some(v4) = embedded_v4(v6)
            && allowed(IpAddr::V4(v4))
        {
            return true;
        }
        !is_special(ip)
    }
}

/// A host that resolved only to addresses an [`AddressPolicy`] denies (or an IP literal it
/// denies). The fetcher turns it into its `private_address` failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The host name (or literal) asked for.
    pub host: String,
    /// The first address refused.
    pub address: IpAddr,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host == self.address.to_string() {
            write!(f, "{} is a private address", self.address)
        } else {
            write!(
                f,
                "{} resolves to a private address ({})",
                self.host, self.address
            )
        }
    }
}

impl std::error::Error for Denied {}

/// The DNS resolver of an HTTP client with a policy: the system's resolver (`getaddrinfo`, as
/// the HTTP client's own), keeping only the addresses the policy permits. A name with none
/// left fails with [`Denied`]; the client connects only to what this returns.
#[cfg(feature = "http")]
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<AddressPolicy>,
}

#[cfg(feature = "http")]
impl GuardedResolver {
    /// A resolver that keeps to `policy`.
    pub fn new(policy: AddressPolicy) -> Self {
        Self {
            policy: Arc::new(policy),
        }
    }
}

#[cfg(feature = "http")]
impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let denied = found.iter().find(|a| !policy.permits(a.ip())).copied();
            let permitted: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| policy.permits(a.ip()))
                .collect();
            match (permitted.is_empty(), denied) {
                (true, Some(d)) => Err(Box::new(Denied {
                    host,
                    address: d.ip(),
                })
                    as Box<dyn std::error::Error + Send + Sync>),
                _ => Ok(Box::new(permitted.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

/// The [`Denied`] in an error's source chain (an HTTP client's error for a refused name).
pub fn denied_in<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e Denied> {
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(denied) = e.downcast_ref::<Denied>() {
            return Some(denied);
        }
        source = e.source();
    }
    None
}

/// Guards an HTTP client that follows redirects (a webhook's, say) with `policy`: names are
/// resolved by the guarded resolver (only permitted addresses are connected to), and each
/// redirect's target is checked (IP literals; names when they resolve), at most
/// `max_redirects` of them. Check the first URL with [`check_literal`] before sending.
#[cfg(feature = "http")]
pub fn guard_client(
    builder: reqwest::ClientBuilder,
    policy: &AddressPolicy,
    max_redirects: usize,
) -> reqwest::ClientBuilder {
    let redirects = policy.clone();
    // No system proxy (`HTTP_PROXY`, …): a proxy would resolve and reach names itself.
    builder
        .no_proxy()
        .dns_resolver(GuardedResolver::new(policy.clone()))
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max_redirects {
                return attempt.error(format!("more than {max_redirects} redirects"));
            }
            match check_literal(&redirects, attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(denied) => attempt.error(denied),
            }
        }))
}

/// Checks a URL's host when it is an IP literal (a name is checked when it resolves).
pub fn check_literal(policy: &AddressPolicy, url: &url::Url) -> Result<(), Denied> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        _ => return Ok(()),
    };
    if policy.permits(ip) {
        Ok(())
    } else {
        Err(Denied {
            host: ip.to_string(),
            address: ip,
        })
    }
}

/// Checks a host by resolving it (for a request's target behind a proxy, which the proxy
/// connects to: this lookup is a check only, so unlike a direct fetch it does not pin the
/// address the proxy will use). A name that does not resolve passes (the proxy answers).
pub async fn check_host(policy: &AddressPolicy, url: &url::Url) -> Result<(), Denied> {
    check_literal(policy, url)?;
    let Some(url::Host::Domain(host)) = url.host() else {
        return Ok(());
    };
    let Ok(found) = tokio::net::lookup_host((host, 0)).await else {
        return Ok(());
    };
    for a in found {
        if !policy.permits(a.ip()) {
            return Err(Denied {
                host: host.to_owned(),
                address: a.ip(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn special_ranges_are_denied_and_public_ones_pass() {
        let denied = [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:c0a8:0101::1",
            "64:ff9b:1::a00:1",
        ];
        let policy = AddressPolicy::default();
        for a in denied {
            assert!(!policy.permits(ip(a)), "{a} must be denied");
        }
        let public = [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:0808:0808::1",
        ];
        for a in public {
            assert!(policy.permits(ip(a)), "{a} must pass");
        }
    }

    #[test]
    fn allowed_ranges_open_special_ones_also_in_mapped_form() {
        let policy = AddressPolicy::new(vec![
            "127.0.0.0/8".parse().unwrap(),
            "10.1.0.0/16".parse().unwrap(),
        ]);
        assert!(policy.permits(ip("127.0.0.1")));
        assert!(policy.permits(ip("::ffff:127.0.0.1")));
        assert!(policy.permits(ip("10.1.200.3")));
        assert!(!policy.permits(ip("10.2.0.1")));
        assert!(!policy.permits(ip("::1")), "v6 loopback is its own range");
        let all = AddressPolicy::new(vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()]);
        assert!(all.permits(ip("169.254.169.254")) && all.permits(ip("fe80::1")));
    }

    #[test]
    fn a_policy_widened_for_a_tenant_keeps_its_own_ranges() {
        let agent = AddressPolicy::new(vec!["10.1.0.0/16".parse().unwrap()]);
        let tenant = [
            parse_range("192.168.7.0/24").unwrap(),
            parse_range("fd00::1").unwrap(),
        ];
        let run = agent.widened(&tenant);
        assert!(run.permits(ip("10.1.0.9")) && run.permits(ip("192.168.7.20")));
        assert!(run.permits(ip("fd00::1")) && !run.permits(ip("fd00::2")));
        assert!(!run.permits(ip("127.0.0.1")));
        assert!(
            !agent.permits(ip("192.168.7.20")),
            "the agent's own policy is unchanged"
        );
        assert_eq!(agent.widened(agent.allowed()), agent, "no range twice");
        assert_eq!(
            parse_range(" 10.0.0.0/8 ").unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert!(parse_range("intranet").is_none() && parse_range("10.0.0.0/33").is_none());
    }

    #[test]
    fn literals_are_checked_and_names_left_to_the_resolver() {
        let policy = AddressPolicy::default();
        let url = |s: &str| url::Url::parse(s).unwrap();
        let e =
            check_literal(&policy, &url("http://169.254.169.254/latest/meta-data/")).unwrap_err();
        assert_eq!(e.to_string(), "169.254.169.254 is a private address");
        assert!(check_literal(&policy, &url("http://[::1]:8080/")).is_err());
        assert!(
            check_literal(&policy, &url("http://0x7f.1/")).is_err(),
            "url normalises hex"
        );
        assert!(check_literal(&policy, &url("http://localhost/")).is_ok());
        assert!(check_literal(&policy, &url("http://93.184.215.14/")).is_ok());
    }

    #[cfg(feature = "http")]
    #[tokio::test]
    async fn the_resolver_refuses_a_name_of_private_addresses_only() {
        use reqwest::dns::Resolve;
        let guarded = GuardedResolver::new(AddressPolicy::default());
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let err = match guarded.resolve(name).await {
            Ok(addrs) => panic!("localhost resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e,
        };
        let denied = err.downcast_ref::<Denied>().expect("a Denied error");
        assert_eq!(denied.host, "localhost");
        assert!(denied.address.is_loopback());
        let open = GuardedResolver::new(AddressPolicy::new(vec![
            "127.0.0.0/8".parse().unwrap(),
            "::1/128".parse().unwrap(),
        ]));
        let addrs: Vec<SocketAddr> = open
            .resolve("localhost".parse().unwrap())
            .await
            .expect("allowed")
            .collect();
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
