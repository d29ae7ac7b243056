//! The one error body every endpoint answers with, and a JSON extractor whose rejections use it.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

/// An error as every endpoint returns it: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable code: `bad_request`, `invalid_json`, `payload_too_large`, `unsupported_media_type`,
    /// `unauthorized`, `forbidden`, `not_found`, `method_not_allowed`, `conflict`,
    /// `too_many_requests`, `unavailable`, `internal`.
    pub code: String,
    /// A sentence for people.
    pub message: String,
}

/// An error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Seconds to wait before trying again (`Retry-After`), for 429 and 503.
    retry_after: Option<u64>,
}

impl ApiError {
    /// What went wrong, as the body's `message` says it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// An error with this status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), retry_after: None }
    }

    /// 429 `too_many_requests` with `Retry-After`.
    pub fn too_many(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self {
            retry_after: Some(retry_after_secs),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_requests", message)
        }
    }

    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404 `not_found`: also what a caller gets for another tenant's resource.
    pub fn not_found(what: &str, id: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", format!("no {what} `{id}`"))
    }

    /// 409 `conflict`.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 503 `unavailable`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 503 `unavailable` with `Retry-After`: try again then.
    pub fn unavailable_for(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self { retry_after: Some(retry_after_secs), ..Self::unavailable(message) }
    }

    /// 500 `internal`; the detail goes to the log, not to the caller.
    pub fn internal(error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error; see the server log")
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_owned(), message: self.message } };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<journal::JournalError> for ApiError {
    fn from(error: journal::JournalError) -> Self {
        Self::internal(error)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid_body",
            _ => "invalid_json",
        };
        // 422 (well-formed JSON of the wrong shape) is reported as 400 like the rest: the body is
        // wrong either way, and the message says where.
        let status =
            if status == StatusCode::UNPROCESSABLE_ENTITY { StatusCode::BAD_REQUEST } else { status };
        Self::new(status, code, rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text())
    }
}

/// `axum::Json` whose rejections are [`ApiError`]s.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Every request body is an object: serde would also read a struct from an array, by
        // position, which no client means.
        let axum::Json(value) = axum::Json::<serde_json::Value>::from_request(request, state).await?;
        if !value.is_object() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                "the body must be a JSON object",
            ));
        }
        serde_json::from_value(value)
            .map(Self)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", format!("invalid body: {e}")))
    }
}

/// Reads a field that must be a JSON object (or absent or null), never an array read by
/// position.
///
/// # Errors
///
/// The value is not an object, or not the type's.
pub fn object_field<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    use serde::de::Error as _;
    match <Option<serde_json::Value> as serde::Deserialize>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value @ serde_json::Value::Object(_)) => {
            serde_json::from_value(value).map(Some).map_err(D::Error::custom)
        }
        Some(_) => Err(D::Error::custom("expected an object")),
    }
}

/// Like [`object_field`] for a required field.
///
/// # Errors
///
/// The value is not an object, or not the type's.
pub fn object_required<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    object_field(deserializer)?.ok_or_else(|| <D::Error as serde::de::Error>::custom("expected an object"))
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// `axum::extract::Query` whose rejections are [`ApiError`]s.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(value) = axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// `axum::extract::Path` whose rejections are [`ApiError`]s.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Self(value)),
            Err(rejection) => Err(Self::Rejection::from(rejection)),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text())
    }
}

/// The answer to any path no route has.
pub async fn fallback() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint; see /openapi.json")
}
