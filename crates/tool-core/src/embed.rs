//! Embeddings, for the tools that search by meaning as well as by words (memory, knowledge
//! bases): the front end puts an `Arc<dyn Embedder>` in the services when an embeddings endpoint
//! is configured (an OpenAI-compatible `/v1/embeddings`); without one those tools search by words
//! alone. Results of both kinds are fused by reciprocal rank ([`fuse`]).
//!
//! ```
//! use tool_core::embed::{cosine, from_bytes, fuse, normalized, to_bytes};
//!
//! let v = normalized(vec![3.0, 4.0]);
//! assert_eq!(from_bytes(&to_bytes(&v)), v);
//! assert!((cosine(&v, &v) - 1.0).abs() < 1e-6);
//! let fused = fuse(&[vec!["a", "b"], vec!["b", "c"]], 60.0);
//! assert_eq!(fused[0].0, "b");
//! ```

use std::collections::HashMap;
use std::hash::Hash;

use futures::future::BoxFuture;

/// Why texts could not be embedded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the embeddings endpoint failed: {0}")]
pub struct EmbedError(pub String);

/// Turns texts into vectors.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// The model's name: vectors of different models are not compared.
    fn model(&self) -> &str;

    /// One vector per text, in order, each of unit length.
    fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>>;
}

/// `vector` scaled to unit length (a zero vector stays zero).
pub fn normalized(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// The cosine of two unit vectors (their dot product); 0 when their lengths differ.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A vector as stored: little-endian `f32`s.
pub fn to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A stored vector back (trailing bytes of a partial `f32` are dropped).
pub fn from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// Reciprocal rank fusion of ranked lists (best first): each item scores `1 / (k + rank)` in
/// every list it is in, summed; best first, ties by first appearance.
pub fn fuse<K: Clone + Eq + Hash>(lists: &[Vec<K>], k: f64) -> Vec<(K, f64)> {
    let mut scores: HashMap<K, (f64, usize)> = HashMap::new();
    let mut order = 0;
    for list in lists {
        for (rank, item) in list.iter().enumerate() {
            let entry = scores.entry(item.clone()).or_insert_with(|| {
                order += 1;
                (0.0, order)
            });
            entry.0 += 1.0 / (k + rank as f64 + 1.0);
        }
    }
    let mut fused: Vec<(K, f64, usize)> =
        scores.into_iter().map(|(key, (score, order))| (key, score, order)).collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    fused.into_iter().map(|(key, score, _)| (key, score)).collect()
}
