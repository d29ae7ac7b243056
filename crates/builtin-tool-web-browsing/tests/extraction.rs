//! Extraction quality on the corpus, as a gate: the benchmark prints the table, this fails when
//! extraction gets worse than it measured when it was chosen.

#[path = "common/score.rs"]
mod score;

use std::path::Path;

use builtin_tool_web_browsing::extract::{self, Strategy};

#[test]
fn the_corpus_is_extracted_with_high_precision_and_recall() {
    let corpus = score::corpus(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/extraction"));
    assert!(corpus.len() >= 12);
    let mut total = 0.0;
    let mut baseline = 0.0;
    for (name, bytes, expected) in &corpus {
        let html = extract::decode(bytes, None, true);
        let url = format!("https://corpus.example/{name}");
        let page = extract::extract_html(&html, Some(&url));
        let s = score::score(&page.markdown, expected);
        assert!(s.f1 >= 0.84, "{name}: precision {:.3} recall {:.3} f1 {:.3}", s.precision, s.recall, s.f1);
        assert_eq!(page.method, "readability", "{name}");
        total += s.f1;
        baseline +=
            score::score(&extract::extract_with(&html, Some(&url), Strategy::WholePage).markdown, expected)
                .f1;
    }
    let (mean, baseline) = (total / corpus.len() as f64, baseline / corpus.len() as f64);
    assert!(mean >= 0.94, "mean F1 {mean:.3}");
    assert!(
        mean - baseline >= 0.08,
        "extraction must beat converting the whole page: {mean:.3} vs {baseline:.3}"
    );
}

#[test]
fn scoring_counts_words_with_multiplicity_and_ignores_link_targets() {
    let s = score::score("[The river](https://x.example/river) river delta", "the river river");
    assert!((s.recall - 1.0).abs() < 1e-9);
    assert!((s.precision - 0.75).abs() < 1e-9, "{s:?}");
}
