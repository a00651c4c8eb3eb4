//! The URL an instance advertises to the others for the partitions it owns, decided once at
//! start: other instances send clients there, so it must be an address they can reach.
//!
//! `http.advertised_url` when set. Otherwise `http://<bind>` (a host name and port as given: the
//! others resolve it themselves), unless the bind address is
//! unspecified (`0.0.0.0` or `[::]`, as in a container), which no other instance can reach: then
//! the machine's host name is resolved (Docker and Kubernetes map it to the container's or pod's
//! address in `/etc/hosts`) and the first address that is neither unspecified nor loopback is
//! used, a loopback one only if there is nothing else (reachable from this machine alone). If
//! the host name resolves to nothing usable, the service does not start.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use crate::config::is_host_and_port;

/// Why no advertised URL could be decided.
#[derive(Debug, thiserror::Error)]
pub enum AdvertiseError {
    #[error("http.bind = {0:?} is not an address and port")]
    Bind(String),
    #[error(
        "http.bind = {bind:?} listens on every interface and http.advertised_url is empty, and \
         the host name {host:?} resolves to no address other instances could reach; set \
         http.advertised_url (on Kubernetes, the pod IP through the downward API)"
    )]
    Unreachable { bind: String, host: String },
    #[error(
        "http.advertised_url = {0:?} is not an absolute http or https URL like \
         http://jurystream-0.jurystream:9464: other instances send clients to it with the \
         request's path after it"
    )]
    Url(String),
}

/// Checks a set `http.advertised_url`: other instances redirect to it (and ask it, with
/// `http.proxy_queries`) with the request's path and query after it, so it must be an
/// absolute http or https URL with a host, a path at most (a prefix a gateway routes by), no
/// query or fragment. An empty one is decided at start instead ([`advertised_url`]).
pub fn check_advertised_url(url: &str) -> Result<(), AdvertiseError> {
    if url.is_empty() {
        return Ok(());
    }
    let refused = || AdvertiseError::Url(url.to_owned());
    let uri: axum::http::Uri = url.parse().map_err(|_| refused())?;
    let scheme = uri.scheme_str().map(str::to_ascii_lowercase);
    let web = matches!(scheme.as_deref(), Some("http" | "https"));
    let host = uri.host().is_some_and(|h| !h.is_empty());
    if !web || !host || uri.query().is_some() || url.contains('#') {
        return Err(refused());
    }
    Ok(())
}

/// The URL to advertise for `bind` and `advertised_url` (see the module doc), resolving
/// `host` (the machine's host name) with `resolve` where needed.
pub fn advertised_url(
    bind: &str,
    advertised_url: &str,
    host: &str,
    resolve: impl Fn(&str, u16) -> Vec<IpAddr>,
) -> Result<String, AdvertiseError> {
    if !advertised_url.is_empty() {
        check_advertised_url(advertised_url)?;
        return Ok(advertised_url.trim_end_matches('/').to_owned());
    }
    let Ok(addr) = bind.parse::<SocketAddr>() else {
        // A host name and port: the others reach it by that name.
        return if is_host_and_port(bind) {
            Ok(format!("http://{bind}"))
        } else {
            Err(AdvertiseError::Bind(bind.to_owned()))
        };
    };
    if !addr.ip().is_unspecified() {
        return Ok(format!("http://{addr}"));
    }
    let found = resolve(host, addr.port());
    let usable = |loopback: bool| {
        found
            .iter()
            .find(|ip| !ip.is_unspecified() && ip.is_loopback() == loopback)
            .copied()
    };
    let ip = usable(false)
        .or_else(|| usable(true))
        .ok_or_else(|| AdvertiseError::Unreachable {
            bind: bind.to_owned(),
            host: host.to_owned(),
        })?;
    if ip.is_loopback() {
        tracing::warn!(%ip, "advertising a loopback address: instances on other machines cannot reach it");
    }
    Ok(format!("http://{}", SocketAddr::new(ip, addr.port())))
}

/// This machine's host name (Linux), else `$HOSTNAME`, else `localhost`.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The addresses `host` resolves to through the system resolver.
pub fn resolve(host: &str, port: u16) -> Vec<IpAddr> {
    (host, port)
        .to_socket_addrs()
        .map(|addrs| addrs.map(|a| a.ip()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn a_set_url_or_a_specific_bind_is_advertised_as_is() {
        let none = |_: &str, _: u16| Vec::new();
        assert_eq!(
            advertised_url("0.0.0.0:9464", "http://pod-1:9464/", "h", none).unwrap(),
            "http://pod-1:9464"
        );
        assert_eq!(
            advertised_url("10.1.2.3:9464", "", "h", none).unwrap(),
            "http://10.1.2.3:9464"
        );
        assert_eq!(
            advertised_url("jurystream-0.jurystream:9464", "", "h", none).unwrap(),
            "http://jurystream-0.jurystream:9464"
        );
        assert!(matches!(
            advertised_url("nonsense", "", "h", none),
            Err(AdvertiseError::Bind(_))
        ));
    }

    /// A set URL other instances cannot put a path after is refused at start.
    #[test]
    fn a_set_url_must_be_an_absolute_web_url() {
        let none = |_: &str, _: u16| Vec::new();
        for bad in [
            "pod-1:9464",
            "jurystream-0.jurystream",
            "not a url",
            "ftp://pod-1:9464",
            "http://",
            "http://pod-1:9464/?x=1",
            "http://pod-1:9464/#top",
            "/v1",
        ] {
            assert!(
                matches!(
                    advertised_url("0.0.0.0:9464", bad, "h", none),
                    Err(AdvertiseError::Url(_))
                ),
                "{bad}"
            );
        }
        for good in [
            "http://10.1.2.3:9464",
            "https://jurystream.example.com",
            "HTTP://pod-1:9464/",
            "http://gateway:8080/jurystream-1",
            "http://[fd00::7]:9464",
        ] {
            assert!(check_advertised_url(good).is_ok(), "{good}");
        }
        assert!(check_advertised_url("").is_ok());
    }

    #[test]
    fn an_unspecified_bind_advertises_the_host_names_reachable_address() {
        let resolved = |addrs: &'static [&'static str]| {
            move |host: &str, port: u16| {
                assert_eq!((host, port), ("pod-7", 9464));
                ips(addrs)
            }
        };
        assert_eq!(
            advertised_url(
                "0.0.0.0:9464",
                "",
                "pod-7",
                resolved(&["127.0.1.1", "10.0.0.7"])
            )
            .unwrap(),
            "http://10.0.0.7:9464"
        );
        assert_eq!(
            advertised_url("[::]:9464", "", "pod-7", resolved(&["fd00::7"])).unwrap(),
            "http://[fd00::7]:9464"
        );
        // Only loopback: reachable from this machine, better than nothing.
        assert_eq!(
            advertised_url("0.0.0.0:9464", "", "pod-7", resolved(&["127.0.0.1"])).unwrap(),
            "http://127.0.0.1:9464"
        );
        let error = advertised_url("0.0.0.0:9464", "", "pod-7", resolved(&["0.0.0.0"]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("http.advertised_url"), "{error}");
    }

    #[test]
    fn the_system_resolver_finds_localhost() {
        assert!(resolve("localhost", 80).iter().any(IpAddr::is_loopback));
    }
}
