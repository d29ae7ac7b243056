//! An OpenAI-compatible embeddings endpoint (`POST {base}/embeddings`) as a
//! [`tool_core::embed::Embedder`]: what memory and knowledge-base searches by meaning use when one
//! is configured (`TOOLHOST_EMBEDDINGS_URL`, `…_MODEL`, `…_API_KEY`; the server's
//! `--embeddings-url` and friends).

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tool_core::embed::{EmbedError, Embedder, normalized};

/// Texts per request.
const BATCH: usize = 64;

/// The most characters of one text sent (models cut at their own context anyway).
const MAX_CHARS: usize = 8_000;

/// An OpenAI-compatible embeddings endpoint.
#[derive(Clone)]
pub struct OpenAiEmbedder {
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
    model: String,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish_non_exhaustive()
    }
}

impl OpenAiEmbedder {
    /// An endpoint at `base_url` (e.g. `https://api.openai.com/v1`; `/embeddings` is added).
    pub fn new(base_url: &str, api_key: Option<String>, model: &str) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self {
            http,
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            api_key: api_key.filter(|key| !key.is_empty()),
            model: model.to_owned(),
        }
    }

    /// The endpoint the environment names: `TOOLHOST_EMBEDDINGS_URL` and
    /// `TOOLHOST_EMBEDDINGS_MODEL` (both needed), `TOOLHOST_EMBEDDINGS_API_KEY` if it wants one.
    pub fn from_env() -> Option<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.trim().is_empty());
        let url = var("TOOLHOST_EMBEDDINGS_URL")?;
        let model = var("TOOLHOST_EMBEDDINGS_MODEL")?;
        Some(Self::new(&url, var("TOOLHOST_EMBEDDINGS_API_KEY"), &model))
    }

    async fn batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let input: Vec<String> = texts
            .iter()
            .map(|text| match text.char_indices().nth(MAX_CHARS) {
                Some((cut, _)) => text[..cut].to_owned(),
                None if text.trim().is_empty() => " ".to_owned(),
                None => text.clone(),
            })
            .collect();
        let mut request = self.http.post(&self.url).json(&json!({"model": self.model, "input": input}));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        // The URL may carry credentials: errors say what failed, not where.
        let response = request.send().await.map_err(|e| EmbedError(e.without_url().to_string()))?;
        let status = response.status();
        let body: Value =
            response.json().await.map_err(|e| EmbedError(format!("{status}: not JSON ({e})")))?;
        if !status.is_success() {
            let message = body["error"]["message"].as_str().map_or_else(|| body.to_string(), str::to_owned);
            return Err(EmbedError(format!("{status}: {message}")));
        }
        let mut data: Vec<(usize, Vec<f32>)> = body["data"]
            .as_array()
            .ok_or_else(|| EmbedError("the answer has no `data`".into()))?
            .iter()
            .enumerate()
            .map(|(position, item)| {
                let index = item["index"].as_u64().map_or(position, |i| i as usize);
                let vector = item["embedding"]
                    .as_array()
                    .map(|values| values.iter().filter_map(Value::as_f64).map(|x| x as f32).collect())
                    .unwrap_or_default();
                (index, vector)
            })
            .collect();
        data.sort_by_key(|(index, _)| *index);
        if data.len() != texts.len() || data.iter().any(|(_, vector)| vector.is_empty()) {
            return Err(EmbedError(format!("asked for {} vectors, got {} usable", texts.len(), data.len())));
        }
        Ok(data.into_iter().map(|(_, vector)| normalized(vector)).collect())
    }
}

impl Embedder for OpenAiEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move {
            let mut vectors = Vec::with_capacity(texts.len());
            for batch in texts.chunks(BATCH) {
                vectors.extend(self.batch(batch).await?);
            }
            Ok(vectors)
        })
    }
}
