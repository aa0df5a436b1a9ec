//! Host-based rules, PostgreSQL's `pg_hba.conf` syntax (a subset): which method a connection
//! from an address, for a database and user, must pass. First match wins; no match is a
//! refusal.
//!
//! Supported: connection types `local` (Unix-domain socket clients), `host` (any TCP
//! connection), `hostssl` (TCP over TLS), `hostnossl` (plaintext TCP), `hostnogssenc` (any
//! TCP: ringwire has no GSS encryption) and `hostgssenc` (parsed, never matches); database lists with
//! `all`, `sameuser`, `samerole` (= `sameuser`: ringwire has no role membership),
//! `replication` (never matches) and names; user lists with `all` and names; double quotes
//! as in PostgreSQL (a quoted keyword is a plain name); addresses `all`, `ADDR/BITS` and
//! `ADDR MASK`, IPv4 or IPv6; methods `trust`, `reject`, `password`, `md5`, `scram-sha-256`
//! and `cert` (`hostssl` only: the client's certificate, verified against `--tls-ca`, must
//! name the user in its common name); options `clientcert=verify-ca|verify-full` (`hostssl`
//! only) and `clientname=CN`. Anything else (host names, `samehost`, `+group`, `@file`, other
//! options such as `map=`, other methods) is a load error naming the line, never silently
//! ignored.

use std::fmt;
use std::net::IpAddr;

/// An authentication method, spelled as in pg_hba.conf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Let the client in without a password.
    Trust,
    /// Refuse the connection (FATAL 28000).
    Reject,
    /// Ask for the password in cleartext and check it against the stored secret.
    Password,
    /// md5 challenge-response for users with an md5 secret; SCRAM for users with a SCRAM
    /// verifier (PostgreSQL's rule: an md5 exchange cannot be checked against a verifier).
    Md5,
    /// SCRAM-SHA-256; a user with only an md5 secret cannot pass it.
    ScramSha256,
    /// A client certificate verified against `--tls-ca` whose common name is the user name
    /// (PostgreSQL's `cert`, without user name maps).
    Cert,
}

impl Method {
    pub fn parse(name: &str) -> Result<Method, String> {
        Ok(match name {
            "trust" => Method::Trust,
            "reject" => Method::Reject,
            "password" => Method::Password,
            "md5" => Method::Md5,
            "scram-sha-256" => Method::ScramSha256,
            "cert" => Method::Cert,
            "gss" | "sspi" | "ident" | "peer" | "pam" | "ldap" | "radius" | "bsd" => {
                return Err(format!(
                    "authentication method \"{name}\" is not supported by ringwire (use trust, reject, password, md5, scram-sha-256 or cert)"
                ))
            }
            _ => return Err(format!("invalid authentication method \"{name}\"")),
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Trust => "trust",
            Method::Reject => "reject",
            Method::Password => "password",
            Method::Md5 => "md5",
            Method::ScramSha256 => "scram-sha-256",
            Method::Cert => "cert",
        }
    }

    /// Whether the method checks a stored secret.
    pub fn needs_password(self) -> bool {
        matches!(self, Method::Password | Method::Md5 | Method::ScramSha256)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnType {
    Local,
    Host,
    HostSsl,
    HostNoSsl,
    HostGssEnc,
    HostNoGssEnc,
}

/// Where a connection comes from, as the rules see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Plaintext TCP. The address is `None` only when the socket could not tell; such a
    /// client matches only rules whose address is `all`.
    Tcp(Option<IpAddr>),
    /// TCP with TLS: `host` and `hostssl` rules.
    Tls(Option<IpAddr>),
    /// A Unix-domain socket: `local` rules.
    Unix,
}

impl Origin {
    /// The host as PostgreSQL names it in its messages.
    pub fn host(self) -> String {
        match self {
            Origin::Tcp(Some(addr)) | Origin::Tls(Some(addr)) => addr.to_string(),
            Origin::Tcp(None) | Origin::Tls(None) => "[unknown]".into(),
            Origin::Unix => "[local]".into(),
        }
    }
}

impl ConnType {
    fn matches(self, origin: Origin) -> bool {
        match (self, origin) {
            (ConnType::Local, Origin::Unix) => true,
            (ConnType::Host | ConnType::HostNoSsl | ConnType::HostNoGssEnc, Origin::Tcp(_)) => true,
            (ConnType::Host | ConnType::HostSsl | ConnType::HostNoGssEnc, Origin::Tls(_)) => true,
            // No GSS encryption: hostgssenc never matches.
            _ => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum DatabaseMatch {
    All,
    SameUser,
    Replication,
    Name(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum UserMatch {
    All,
    Name(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AddressMatch {
    All,
    /// IPv4 rules match only IPv4 clients, IPv6 rules only IPv6 ones (as in PostgreSQL).
    V4 {
        net: u32,
        mask: u32,
    },
    V6 {
        net: u128,
        mask: u128,
    },
}

impl AddressMatch {
    fn matches(self, origin: Origin) -> bool {
        let addr = match origin {
            Origin::Tcp(addr) | Origin::Tls(addr) => addr,
            Origin::Unix => None,
        };
        match (self, addr) {
            (AddressMatch::All, _) => true,
            (AddressMatch::V4 { net, mask }, Some(IpAddr::V4(a))) => {
                (u32::from(a) ^ net) & mask == 0
            }
            (AddressMatch::V6 { net, mask }, Some(IpAddr::V6(a))) => {
                (u128::from(a) ^ net) & mask == 0
            }
            _ => false,
        }
    }
}

/// What a rule asks of the client's certificate (`clientcert=`), checked before the method
/// runs: any certificate at all must have been sent and verified against `--tls-ca`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientCertCheck {
    /// No certificate needed.
    #[default]
    Off,
    /// `verify-ca`: a certificate that chains to `--tls-ca`.
    VerifyCa,
    /// `verify-full` (and method `cert`): that, and its common name is the user name, checked
    /// after the method succeeded.
    VerifyFull,
}

/// One rule line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// 1-based line in the file (0 for the rule made from `--auth`).
    pub line: usize,
    /// The line as written, for the log.
    pub text: String,
    conn: ConnType,
    databases: Vec<DatabaseMatch>,
    users: Vec<UserMatch>,
    address: AddressMatch,
    pub method: Method,
    pub clientcert: ClientCertCheck,
}

/// The rules, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hba {
    pub rules: Vec<Rule>,
}

impl Hba {
    /// `--auth METHOD` without a rules file: `local all all METHOD` and
    /// `host all all all METHOD`, one method for every client.
    pub fn single(method: Method) -> Hba {
        let rule = |conn, text: String| Rule {
            line: 0,
            text,
            conn,
            databases: vec![DatabaseMatch::All],
            users: vec![UserMatch::All],
            address: AddressMatch::All,
            method,
            clientcert: ClientCertCheck::Off,
        };
        Hba {
            rules: vec![
                rule(ConnType::Local, format!("local all all {method}")),
                rule(ConnType::Host, format!("host all all all {method}")),
            ],
        }
    }

    /// Parse a rules file. Errors name the line: `line N: what is wrong`.
    pub fn parse(text: &str) -> Result<Hba, String> {
        let mut rules = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let fields = tokenize(raw).map_err(|e| format!("line {}: {e}", i + 1))?;
            if fields.is_empty() {
                continue;
            }
            let rule = parse_rule(fields, i + 1, raw.trim())
                .map_err(|e| format!("line {}: {e}", i + 1))?;
            rules.push(rule);
        }
        Ok(Hba { rules })
    }

    /// The first rule that applies to a connection from `origin` for `database` and `user`;
    /// `None` means "no pg_hba.conf entry".
    pub fn find(&self, origin: Origin, database: &str, user: &str) -> Option<&Rule> {
        let origin = match origin {
            Origin::Tcp(addr) => Origin::Tcp(addr.map(canonical)),
            Origin::Tls(addr) => Origin::Tls(addr.map(canonical)),
            Origin::Unix => Origin::Unix,
        };
        self.rules.iter().find(|r| {
            r.conn.matches(origin)
                && r.address.matches(origin)
                && r.databases.iter().any(|d| match d {
                    DatabaseMatch::All => true,
                    DatabaseMatch::SameUser => database == user,
                    DatabaseMatch::Replication => false,
                    DatabaseMatch::Name(n) => n == database,
                })
                && r.users.iter().any(|u| match u {
                    UserMatch::All => true,
                    UserMatch::Name(n) => n == user,
                })
        })
    }
}

/// An IPv4 client seen through a dual-stack IPv6 socket (`::ffff:a.b.c.d`) is an IPv4 client:
/// PostgreSQL listens on separate v4 and v6 sockets, so there it arrives as IPv4 and matches
/// IPv4 rules; ringwire's `[::]` listener must behave the same.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Token {
    text: String,
    quoted: bool,
}

impl Token {
    fn is_keyword(&self, keyword: &str) -> bool {
        !self.quoted && self.text == keyword
    }
}

/// Split a line into whitespace-separated fields of comma-separated tokens, with PostgreSQL's
/// quoting (`"..."`, `""` for a literal quote inside quotes) and `#` comments.
fn tokenize(line: &str) -> Result<Vec<Vec<Token>>, String> {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut fields = Vec::new();
    let blank = |c: char| c == ' ' || c == '\t' || c == '\r';
    loop {
        while i < chars.len() && blank(chars[i]) {
            i += 1;
        }
        if i == chars.len() || chars[i] == '#' {
            return Ok(fields);
        }
        let mut field = Vec::new();
        loop {
            while i < chars.len() && blank(chars[i]) {
                i += 1;
            }
            let mut token = Token {
                text: String::new(),
                quoted: false,
            };
            let (mut in_quote, mut was_quote, mut comma) = (false, false, false);
            while i < chars.len() && (!blank(chars[i]) || in_quote) {
                let c = chars[i];
                i += 1;
                if c == '#' && !in_quote {
                    i = chars.len();
                    break;
                }
                if c == ',' && !in_quote {
                    comma = true;
                    break;
                }
                if c != '"' || was_quote {
                    token.text.push(c);
                }
                was_quote = in_quote && c == '"' && !was_quote;
                if c == '"' {
                    in_quote = !in_quote;
                    token.quoted = true;
                }
            }
            if in_quote {
                return Err("unterminated quoted string".into());
            }
            if !token.text.is_empty() || token.quoted {
                field.push(token);
            }
            if !comma {
                break;
            }
        }
        if !field.is_empty() {
            fields.push(field);
        }
    }
}

fn single(field: Vec<Token>, what: &str) -> Result<Token, String> {
    let mut field = field.into_iter();
    match (field.next(), field.next()) {
        (Some(t), None) => Ok(t),
        _ => Err(format!("multiple values specified for {what}")),
    }
}

fn parse_rule(fields: Vec<Vec<Token>>, line: usize, text: &str) -> Result<Rule, String> {
    let mut fields = fields.into_iter();
    let conn_token = single(fields.next().expect("a non-empty line"), "connection type")?;
    let conn = match conn_token.text.as_str() {
        "local" => ConnType::Local,
        "host" => ConnType::Host,
        "hostssl" => ConnType::HostSsl,
        "hostnossl" => ConnType::HostNoSsl,
        "hostgssenc" => ConnType::HostGssEnc,
        "hostnogssenc" => ConnType::HostNoGssEnc,
        other => return Err(format!("invalid connection type \"{other}\"")),
    };
    let databases = fields
        .next()
        .ok_or("end-of-line before database specification")?
        .into_iter()
        .map(|t| {
            Ok(match t.text.as_str() {
                _ if t.is_keyword("all") => DatabaseMatch::All,
                _ if t.is_keyword("sameuser")
                    || t.is_keyword("samerole")
                    || t.is_keyword("samegroup") =>
                {
                    DatabaseMatch::SameUser
                }
                _ if t.is_keyword("replication") => DatabaseMatch::Replication,
                s if s.starts_with('@') && !t.quoted => {
                    return Err(format!(
                        "file inclusion (\"{s}\") is not supported by ringwire"
                    ))
                }
                s => DatabaseMatch::Name(s.to_string()),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let users = fields
        .next()
        .ok_or("end-of-line before role specification")?
        .into_iter()
        .map(|t| {
            Ok(match t.text.as_str() {
                _ if t.is_keyword("all") => UserMatch::All,
                s if (s.starts_with('@') || s.starts_with('+')) && !t.quoted => {
                    return Err(format!(
                        "\"{s}\": group membership and file inclusion are not supported by ringwire"
                    ))
                }
                s => UserMatch::Name(s.to_string()),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let address = if conn == ConnType::Local {
        AddressMatch::All
    } else {
        let token = single(
            fields
                .next()
                .ok_or("end-of-line before IP address specification")?,
            "host address",
        )?;
        if token.is_keyword("all") {
            AddressMatch::All
        } else if token.is_keyword("samehost") || token.is_keyword("samenet") {
            return Err(format!("\"{}\" is not supported by ringwire", token.text));
        } else if let Some((addr, bits)) = token.text.split_once('/') {
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| format!("invalid IP address \"{addr}\""))?;
            let bits: u32 = bits
                .parse()
                .ok()
                .filter(|&b| b <= if addr.is_ipv4() { 32 } else { 128 })
                .ok_or_else(|| format!("invalid CIDR mask in address \"{}\"", token.text))?;
            network(addr, prefix_mask(addr, bits))?
        } else {
            let addr: IpAddr = token.text.parse().map_err(|_| {
                format!(
                    "invalid IP address \"{}\" (host names are not supported by ringwire)",
                    token.text
                )
            })?;
            let mask_token = single(
                fields
                    .next()
                    .ok_or("end-of-line before netmask specification")?,
                "netmask",
            )?;
            let mask: IpAddr = mask_token
                .text
                .parse()
                .map_err(|_| format!("invalid IP mask \"{}\"", mask_token.text))?;
            network(addr, mask)?
        }
    };
    let method_token = single(
        fields
            .next()
            .ok_or("end-of-line before authentication method")?,
        "authentication type",
    )?;
    let method = Method::parse(&method_token.text)?;
    // PostgreSQL's wording for each refusal (hba.c), so a file it refuses is refused alike.
    let ssl_only = conn == ConnType::HostSsl;
    if method == Method::Cert && !ssl_only {
        return Err("cert authentication is only supported on hostssl connections".into());
    }
    let mut clientcert = if method == Method::Cert {
        ClientCertCheck::VerifyFull
    } else {
        ClientCertCheck::Off
    };
    for option in fields {
        for token in option {
            let Some((name, value)) = token.text.split_once('=') else {
                return Err(format!(
                    "authentication option not in name=value format: {}",
                    token.text
                ));
            };
            match name {
                "clientcert" if !ssl_only => {
                    return Err("clientcert can only be configured for \"hostssl\" rows".into())
                }
                "clientcert" => match value {
                    "verify-full" => clientcert = ClientCertCheck::VerifyFull,
                    "verify-ca" if method == Method::Cert => {
                        return Err("clientcert only accepts \"verify-full\" when using \"cert\" authentication".into())
                    }
                    "verify-ca" => clientcert = ClientCertCheck::VerifyCa,
                    _ => return Err(format!("invalid value for clientcert: \"{value}\"")),
                },
                "clientname" if !ssl_only => {
                    return Err("clientname can only be configured for \"hostssl\" rows".into())
                }
                "clientname" => match value {
                    "CN" => {}
                    "DN" => {
                        return Err(
                            "clientname=DN is not supported by ringwire (the common name is matched)"
                                .into(),
                        )
                    }
                    _ => return Err(format!("invalid value for clientname: \"{value}\"")),
                },
                _ => {
                    return Err(format!(
                        "authentication option \"{name}\" is not supported by ringwire"
                    ))
                }
            }
        }
    }
    Ok(Rule {
        line,
        text: text.to_string(),
        conn,
        databases,
        users,
        address,
        method,
        clientcert,
    })
}

fn prefix_mask(addr: IpAddr, bits: u32) -> IpAddr {
    match addr {
        IpAddr::V4(_) => IpAddr::V4(u32::MAX.checked_shl(32 - bits).unwrap_or(0).into()),
        IpAddr::V6(_) => IpAddr::V6(u128::MAX.checked_shl(128 - bits).unwrap_or(0).into()),
    }
}

fn network(addr: IpAddr, mask: IpAddr) -> Result<AddressMatch, String> {
    match (addr, mask) {
        (IpAddr::V4(a), IpAddr::V4(m)) => Ok(AddressMatch::V4 {
            net: a.into(),
            mask: m.into(),
        }),
        (IpAddr::V6(a), IpAddr::V6(m)) => Ok(AddressMatch::V6 {
            net: a.into(),
            mask: m.into(),
        }),
        _ => Err(format!(
            "IP address and mask do not match (\"{addr}\", \"{mask}\")"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(s: &str) -> Origin {
        Origin::Tcp(Some(s.parse().unwrap()))
    }

    fn method(hba: &Hba, peer: &str, db: &str, user: &str) -> Option<Method> {
        hba.find(tcp(peer), db, user).map(|r| r.method)
    }

    #[test]
    fn first_match_wins_across_types_lists_and_cidrs() {
        let hba = Hba::parse(
            "# comment\n\
             \n\
             local   all all                 trust\n\
             hostssl all all 0.0.0.0/0       trust\n\
             host    app alice,bob 10.0.0.0/8 scram-sha-256 # trailing comment\n\
             host    \"all\" all 10.1.0.0 255.255.0.0  md5\n\
             hostnossl sameuser all 10.0.0.0/8 password\n\
             host    all all ::1/128          trust\n\
             host    all \"+x\",carol 192.168.0.0/16  reject\n\
             host    all all 10.0.0.0/8       reject\n",
        )
        .unwrap();
        assert_eq!(hba.rules.len(), 8);
        assert_eq!(hba.rules[2].line, 5);
        assert_eq!(
            method(&hba, "10.2.3.4", "app", "bob"),
            Some(Method::ScramSha256)
        );
        assert_eq!(
            method(&hba, "10.2.3.4", "app", "carol"),
            Some(Method::Reject)
        );
        // A quoted keyword is a name: the database literally called "all".
        assert_eq!(method(&hba, "10.1.3.4", "all", "carol"), Some(Method::Md5));
        assert_eq!(
            method(&hba, "10.1.3.4", "other", "carol"),
            Some(Method::Reject)
        );
        assert_eq!(
            method(&hba, "10.2.3.4", "carol", "carol"),
            Some(Method::Password)
        );
        assert_eq!(method(&hba, "::1", "x", "y"), Some(Method::Trust));
        assert_eq!(method(&hba, "192.168.1.1", "x", "+x"), Some(Method::Reject));
        assert_eq!(method(&hba, "192.168.1.1", "x", "dave"), None);
        // IPv4 rules do not match IPv6 clients, except an IPv4 client on a dual-stack socket.
        assert_eq!(
            method(&hba, "::ffff:10.2.3.4", "app", "bob"),
            Some(Method::ScramSha256)
        );
        assert_eq!(method(&hba, "fe80::1", "app", "bob"), None);
        assert_eq!(hba.find(Origin::Tcp(None), "app", "bob"), None);
        let all = Hba::single(Method::Md5);
        assert_eq!(
            all.find(Origin::Tcp(None), "a", "b").unwrap().method,
            Method::Md5
        );
        // `local` rules are for Unix-socket clients only, and host rules only for TCP ones.
        assert_eq!(
            hba.find(Origin::Unix, "x", "y").unwrap().method,
            Method::Trust
        );
        assert_eq!(hba.find(Origin::Unix, "x", "y").unwrap().line, 3);
        assert_eq!(
            all.find(Origin::Unix, "a", "b").unwrap().method,
            Method::Md5
        );
        // hostssl rules only for TLS clients, hostnossl only for plaintext ones; host for both.
        let tls = Origin::Tls(Some("10.2.3.4".parse().unwrap()));
        assert_eq!(hba.find(tls, "app", "bob").unwrap().method, Method::Trust);
        let no_ssl = Hba::parse(
            "hostnossl all all all reject
host all all all md5",
        )
        .unwrap();
        assert_eq!(no_ssl.find(tls, "a", "b").unwrap().method, Method::Md5);
        assert_eq!(
            no_ssl.find(tcp("10.2.3.4"), "a", "b").unwrap().method,
            Method::Reject
        );
        let v6_rule = Hba::parse("hostssl all all ::1/128 trust").unwrap();
        assert_eq!(v6_rule.find(tls, "a", "b"), None);
        assert!(v6_rule
            .find(Origin::Tls(Some("::1".parse().unwrap())), "a", "b")
            .is_some());
        assert_eq!(v6_rule.find(tcp("::1"), "a", "b"), None);
        let tcp_only = Hba::parse("host all all all trust").unwrap();
        assert_eq!(tcp_only.find(Origin::Unix, "a", "b"), None);
        assert_eq!(Origin::Unix.host(), "[local]");
    }

    #[test]
    fn cidr_edges() {
        let hba = Hba::parse("host all all 127.0.0.1/32 trust\nhost all all 0.0.0.0/0 md5\nhost all all ::/0 password").unwrap();
        assert_eq!(method(&hba, "127.0.0.1", "d", "u"), Some(Method::Trust));
        assert_eq!(method(&hba, "127.0.0.2", "d", "u"), Some(Method::Md5));
        assert_eq!(
            method(&hba, "2001:db8::1", "d", "u"),
            Some(Method::Password)
        );
        let hba = Hba::parse("host all all 127.0.0.0/31 trust").unwrap();
        assert_eq!(method(&hba, "127.0.0.1", "d", "u"), Some(Method::Trust));
        assert_eq!(method(&hba, "127.0.0.2", "d", "u"), None);
    }

    #[test]
    fn client_certificate_options() {
        let hba = Hba::parse(
            "hostssl all a all cert clientname=CN\n\
             hostssl all b all scram-sha-256 clientcert=verify-full\n\
             hostssl all c all trust clientcert=verify-ca\n\
             hostssl all d all md5",
        )
        .unwrap();
        let checks: Vec<(Method, ClientCertCheck)> =
            hba.rules.iter().map(|r| (r.method, r.clientcert)).collect();
        assert_eq!(
            checks,
            [
                (Method::Cert, ClientCertCheck::VerifyFull),
                (Method::ScramSha256, ClientCertCheck::VerifyFull),
                (Method::Trust, ClientCertCheck::VerifyCa),
                (Method::Md5, ClientCertCheck::Off),
            ]
        );
    }

    #[test]
    fn quoting_like_postgres() {
        let f = tokenize(r#"host "a b","c""d" x,  y  "" # z"#).unwrap();
        let texts: Vec<Vec<&str>> = f
            .iter()
            .map(|f| f.iter().map(|t| t.text.as_str()).collect())
            .collect();
        assert_eq!(
            texts,
            vec![vec!["host"], vec!["a b", "c\"d"], vec!["x", "y"], vec![""]]
        );
        assert!(tokenize("host \"open").is_err());
    }

    #[test]
    fn bad_lines_name_the_problem() {
        for (text, want) in [
            (
                "hots all all all trust",
                "line 1: invalid connection type \"hots\"",
            ),
            ("host all", "line 1: end-of-line before role specification"),
            (
                "host all all",
                "end-of-line before IP address specification",
            ),
            (
                "host all all 10.0.0.0/8",
                "end-of-line before authentication method",
            ),
            (
                "host all all 10.0.0.0/33 trust",
                "invalid CIDR mask in address \"10.0.0.0/33\"",
            ),
            (
                "host all all 10.0.0.x/8 trust",
                "invalid IP address \"10.0.0.x\"",
            ),
            (
                "host all all example.com trust",
                "host names are not supported",
            ),
            (
                "host all all samehost trust",
                "\"samehost\" is not supported",
            ),
            (
                "host all all 10.0.0.0 255.0.0.0",
                "end-of-line before authentication method",
            ),
            ("host all all 10.0.0.0 ::ffff trust", "do not match"),
            (
                "host all all all ident",
                "\"ident\" is not supported by ringwire",
            ),
            (
                "host all all all magic",
                "invalid authentication method \"magic\"",
            ),
            (
                "host all all all md5 clientcert=verify-ca",
                "clientcert can only be configured for \"hostssl\" rows",
            ),
            (
                "hostssl all all all md5 clientcert=1",
                "invalid value for clientcert: \"1\"",
            ),
            (
                "hostssl all all all cert clientcert=verify-ca",
                "only accepts \"verify-full\"",
            ),
            (
                "host all all all cert",
                "cert authentication is only supported on hostssl connections",
            ),
            (
                "hostssl all all all md5 map=certmap",
                "option \"map\" is not supported by ringwire",
            ),
            (
                "hostssl all all all md5 clientcert",
                "not in name=value format",
            ),
            ("host all +admins all md5", "group membership"),
            ("host @dbs all all md5", "file inclusion"),
            (
                "\n\nhost all all all,10.0.0.1 md5",
                "line 3: multiple values specified for host address",
            ),
        ] {
            let e = Hba::parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
