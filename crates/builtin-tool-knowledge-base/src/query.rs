//! The English function words a search leaves out of the index and of questions ("how do I …"):
//! they match every chunk and say nothing of its topic.
//!
//! ```
//! use builtin_tool_knowledge_base::query::is_stopword;
//!
//! assert!(is_stopword("how") && is_stopword("the"));
//! assert!(!is_stopword("dependency"));
//! ```

/// English function words (and question words) that carry no topic.
const STOPWORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at",
    "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could",
    "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "get", "gets",
    "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in",
    "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not",
    "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own", "same",
    "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "then", "there",
    "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we",
    "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you",
    "your", "yours", "yourself", "want", "need", "tell", "also", "whether", "s", "t", "don",
];

/// Whether a (lowercased) word is an English function word.
pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.contains(&word)
}
