//! Keeping secrets out of errors and logs: [`redact_url`] for the URLs the store names,
//! [`scrub`] for driver messages that might quote a password.

/// Query parameters of a database URL whose values are secrets.
const SECRET_PARAMS: &[&str] = &["password", "sslpassword", "pass", "pwd"];

/// `url` with its password replaced by `***`: the userinfo password, and the value of any
/// `password`-like query parameter. A string that does not parse as a URL loses everything
/// before its last `@` (after the scheme).
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            let secret_query = parsed.query_pairs().any(|(k, _)| is_secret_param(&k));
            if secret_query {
                let pairs: Vec<(String, String)> = parsed
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if is_secret_param(&k) {
                            "***".to_owned()
                        } else {
                            v.into_owned()
                        };
                        (k.into_owned(), v)
                    })
                    .collect();
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
            }
            parsed.to_string()
        }
        Err(_) => {
            let start = url.find("://").map_or(0, |i| i + 3);
            match url[start..].rfind('@') {
                Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
                None => match url.split_once('?') {
                    Some((base, query)) => {
                        let query: Vec<String> = query
                            .split('&')
                            .map(|pair| match pair.split_once('=') {
                                Some((k, _)) if is_secret_param(k) => format!("{k}=***"),
                                _ => pair.to_owned(),
                            })
                            .collect();
                        format!("{base}?{}", query.join("&"))
                    }
                    None => url.to_owned(),
                },
            }
        }
    }
}

fn is_secret_param(key: &str) -> bool {
    SECRET_PARAMS.iter().any(|s| s.eq_ignore_ascii_case(key))
}

/// `message` with every secret of `url` (its password, raw and percent-decoded, and the
/// values of password-like parameters) replaced by `***`.
pub(crate) fn scrub(message: String, url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else {
        return message;
    };
    let mut secrets: Vec<String> = Vec::new();
    if let Some(password) = parsed.password() {
        secrets.push(password.to_owned());
        if let Ok(decoded) = percent_decode(password) {
            secrets.push(decoded);
        }
    }
    for (k, v) in parsed.query_pairs() {
        if is_secret_param(&k) {
            secrets.push(v.into_owned());
        }
    }
    // longest first, so that a secret containing another is replaced whole
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(message, |m, s| m.replace(s.as_str(), "***"))
}

/// Percent-decodes `s` as UTF-8.
fn percent_decode(s: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_userinfo_and_parameters() {
        assert_eq!(
            redact_url("postgres://silk:s3cret@db:5432/meta"),
            "postgres://silk:***@db:5432/meta"
        );
        let r = redact_url("postgres://db/meta?user=silk&password=s3cret&sslmode=require");
        assert!(!r.contains("s3cret"), "{r}");
        assert!(r.contains("sslmode=require"), "{r}");
        assert_eq!(redact_url("postgres://db/meta"), "postgres://db/meta");
        assert_eq!(redact_url("not a url u:s3cret@host"), "***@host");
        assert_eq!(redact_url("::bad://u:s3cret@host/x"), "::bad://***@host/x");
        assert_eq!(
            redact_url("postgres://h:bad/db?sslmode=require&password=s3cret"),
            "postgres://h:bad/db?sslmode=require&password=***"
        );
    }

    #[test]
    fn scrubs_raw_and_decoded_passwords() {
        let url = "postgres://u:p%40ss%21word@h/db?password=other";
        let m = scrub("a p%40ss%21word b p@ss!word c other".to_owned(), url);
        assert_eq!(m, "a *** b *** c ***");
    }
}
