//! The errors of the controller shells, typed by what the API server (or the network) answered,
//! so that every shell handles a 404, a 409 or a 429 the same way.

use std::fmt;

use prometheus_client::encoding::EncodeLabelValue;

/// Errors of the controller shells.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the namespace kube-system has no uid")]
    NoClusterId,
    #[error("a CRD did not become established: {0}")]
    CrdNotEstablished(String),
    #[error("the {0} cache stopped")]
    CacheStopped(&'static str),
    #[error("the object has no {0}")]
    Incomplete(&'static str),
    #[error("cannot start: {0}")]
    Startup(String),
    #[error("this replica no longer holds the leader lease")]
    NotLeader,
}

/// What kind of failure an [`Error`] is: a metric label, and how soon to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are lower case
pub enum ErrorKind {
    /// 404: the object (or its namespace) is gone.
    not_found,
    /// 409: the object changed since it was read (or already exists).
    conflict,
    /// 410: a watch or list asked for a resourceVersion the API server no longer has.
    gone,
    /// 429: too many requests, or an eviction a PodDisruptionBudget refuses.
    too_many_requests,
    /// 5xx.
    server,
    /// Any other answer of the API server (400, 403, 422...).
    api,
    /// The request timed out.
    timeout,
    /// No answer: connection refused or reset, TLS, a body that could not be read.
    transport,
    startup,
    cache,
    /// The object lacks something every object has (a name, a uid).
    object,
    not_leader,
}

impl ErrorKind {
    /// Whether trying again soon is likely to help: the object moved on, or the API server is
    /// busy or unreachable for a moment.
    pub fn transient(self) -> bool {
        matches!(
            self,
            ErrorKind::conflict
                | ErrorKind::gone
                | ErrorKind::too_many_requests
                | ErrorKind::server
                | ErrorKind::timeout
                | ErrorKind::transport
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Kube(e) => kind_of(e),
            Error::NoClusterId | Error::CrdNotEstablished(_) | Error::Startup(_) => {
                ErrorKind::startup
            }
            Error::CacheStopped(_) => ErrorKind::cache,
            Error::Incomplete(_) => ErrorKind::object,
            Error::NotLeader => ErrorKind::not_leader,
        }
    }
}

/// The kind of a kube client error.
pub fn kind_of(e: &kube::Error) -> ErrorKind {
    match e {
        kube::Error::Api(s) => match s.code {
            404 => ErrorKind::not_found,
            409 => ErrorKind::conflict,
            410 => ErrorKind::gone,
            429 => ErrorKind::too_many_requests,
            504 => ErrorKind::timeout,
            500..=599 => ErrorKind::server,
            _ => ErrorKind::api,
        },
        kube::Error::Service(inner) if is_timeout(inner.as_ref()) => ErrorKind::timeout,
        kube::Error::HyperError(h) if h.is_timeout() => ErrorKind::timeout,
        _ => ErrorKind::transport,
    }
}

fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.to_string().contains("timed out")
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The answers a write may take as done: the object is already gone, or already there.
pub trait ApiResult<T> {
    /// `Ok(None)` when the object is not found (404): there is nothing left to change.
    fn found(self) -> Result<Option<T>, Error>;
    /// `Ok(None)` when an object of that name already exists: a name is a promise of the same
    /// object, so creating it again is done.
    fn created(self) -> Result<Option<T>, Error>;
}

impl<T> ApiResult<T> for Result<T, kube::Error> {
    fn found(self) -> Result<Option<T>, Error> {
        match self {
            Ok(t) => Ok(Some(t)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn created(self) -> Result<Option<T>, Error> {
        match self {
            Ok(t) => Ok(Some(t)),
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            reason: reason.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn api_answers_have_their_kind() {
        for (code, kind) in [
            (404, ErrorKind::not_found),
            (409, ErrorKind::conflict),
            (410, ErrorKind::gone),
            (429, ErrorKind::too_many_requests),
            (500, ErrorKind::server),
            (503, ErrorKind::server),
            (504, ErrorKind::timeout),
            (403, ErrorKind::api),
            (422, ErrorKind::api),
        ] {
            assert_eq!(Error::from(api(code, "")).kind(), kind, "{code}");
        }
        assert!(ErrorKind::conflict.transient() && !ErrorKind::api.transient());
    }

    #[test]
    fn a_timeout_anywhere_in_the_chain_is_a_timeout() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "read");
        assert_eq!(
            kind_of(&kube::Error::Service(Box::new(io))),
            ErrorKind::timeout
        );
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(
            kind_of(&kube::Error::Service(Box::new(refused))),
            ErrorKind::transport
        );
    }

    #[test]
    fn gone_and_existing_objects_are_done_conflicts_are_not() {
        let r: Result<(), kube::Error> = Err(api(404, "NotFound"));
        assert!(matches!(r.found(), Ok(None)));
        let r: Result<(), kube::Error> = Err(api(409, "AlreadyExists"));
        assert!(matches!(r.created(), Ok(None)));
        let r: Result<(), kube::Error> = Err(api(409, "Conflict"));
        assert!(
            r.created().is_err(),
            "a stale write is not a created object"
        );
        let r: Result<(), kube::Error> = Err(api(500, ""));
        assert!(r.found().is_err());
    }
}
