//! Long results compressed in the SQLite journal.
//!
//! A result's JSON text of [`PACK_FROM`] bytes or more is stored as a BLOB: one format byte, then
//! a zstd frame (level 1, which records the text's length). A short text, or one that does not get
//! smaller, stays TEXT, which `sqlite3` and SQLite's JSON functions read as it is. Reading takes
//! either. A 50-line read of source text (3.5 KB of JSON) is stored in 1.8 KB (measured with
//! `dbstat` after a soak, `docs/benchmarks.md`). It is compressed in the caller's task, not the
//! writer's; a throwaway timing loop, not a committed benchmark, put that at about 14 µs here, and
//! DEFLATE through `miniz_oxide` at 25 µs for 5% more bytes.
//!
//! Postgres needs none of this: it compresses a `jsonb` value past about 2 KB itself (TOAST) and
//! moves larger ones out of the row.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;

use sqlx::error::BoxDynError;
use sqlx::{Decode, Postgres, Sqlite, Type, TypeInfo as _, ValueRef as _};

use crate::JournalError;

/// Texts at least this long are compressed.
pub(crate) const PACK_FROM: usize = 512;

/// The first byte of a packed result: a zstd frame follows.
const ZSTD: u8 = 2;

/// zstd's fastest regular level: level 3 kept 2% less for a quarter more time.
const LEVEL: i32 = 1;

/// The most a packed result may unpack to (a row holds far less; this bounds what a corrupt header
/// can make us allocate).
const UNPACK_LIMIT: u64 = 64 * 1024 * 1024;

thread_local! {
    /// A compression context per thread: making one costs more than compressing a small text.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
}

/// A result's JSON as the SQLite writer binds it.
#[derive(Debug, Clone)]
pub(crate) enum StoredResult {
    Text(Arc<str>),
    Packed(Arc<[u8]>),
}

impl StoredResult {
    /// The text compressed when it is long and that makes it smaller.
    pub(crate) fn pack(self) -> Self {
        let Self::Text(text) = &self else { return self };
        if text.len() < PACK_FROM {
            return self;
        }
        let compressed = COMPRESSOR.with(|cell| {
            let mut cell = cell.borrow_mut();
            if cell.is_none() {
                *cell = zstd::bulk::Compressor::new(LEVEL).ok();
            }
            cell.as_mut()?.compress(text.as_bytes()).ok()
        });
        // Without a context (out of memory) the text is stored as it is.
        let Some(compressed) = compressed else { return self };
        if compressed.len() + 1 >= text.len() {
            return self;
        }
        let mut packed = Vec::with_capacity(compressed.len() + 1);
        packed.push(ZSTD);
        packed.extend_from_slice(&compressed);
        Self::Packed(packed.into())
    }

    /// The JSON text.
    pub(crate) fn json(&self) -> Result<Cow<'_, str>, JournalError> {
        match self {
            Self::Text(text) => Ok(Cow::Borrowed(text)),
            Self::Packed(bytes) => unpack(bytes).map(Cow::Owned),
        }
    }
}

/// The JSON text of a packed result.
pub(crate) fn unpack(bytes: &[u8]) -> Result<String, JournalError> {
    let corrupt = |why: String| JournalError::Corrupt(format!("a packed result {why}"));
    match bytes.split_first() {
        Some((&ZSTD, frame)) => {
            let size = match zstd::zstd_safe::get_frame_content_size(frame) {
                Ok(Some(size)) if size <= UNPACK_LIMIT => size,
                Ok(Some(size)) => return Err(corrupt(format!("claims {size} bytes"))),
                _ => return Err(corrupt("has no zstd frame header".into())),
            };
            let capacity = usize::try_from(size).map_err(|_| corrupt(format!("claims {size} bytes")))?;
            let text = zstd::bulk::decompress(frame, capacity)
                .map_err(|e| corrupt(format!("does not decompress: {e}")))?;
            String::from_utf8(text).map_err(|_| corrupt("is not UTF-8".into()))
        }
        Some((format, _)) => Err(corrupt(format!("has an unknown format {format}"))),
        None => Err(corrupt("is empty".into())),
    }
}

/// Either form as the writer binds it: TEXT or a BLOB (read back by [`ResultText`]).
impl rusqlite::ToSql for StoredResult {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Self::Text(text) => ValueRef::Text(text.as_bytes()),
            Self::Packed(bytes) => ValueRef::Blob(bytes),
        }))
    }
}

/// A result's JSON text as read: a TEXT column as it is, a BLOB (SQLite's packed form) unpacked.
#[derive(Debug)]
pub(crate) struct ResultText(pub(crate) String);

impl Type<Sqlite> for ResultText {
    fn type_info() -> sqlx::sqlite::SqliteTypeInfo {
        <str as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &sqlx::sqlite::SqliteTypeInfo) -> bool {
        <[u8] as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Sqlite> for ResultText {
    fn decode(value: sqlx::sqlite::SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        if value.type_info().name() == "BLOB" {
            let bytes = <&[u8] as Decode<'r, Sqlite>>::decode(value)?;
            Ok(Self(unpack(bytes)?))
        } else {
            Ok(Self(<String as Decode<'r, Sqlite>>::decode(value)?))
        }
    }
}

impl Type<Postgres> for ResultText {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <String as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <String as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for ResultText {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Self(<String as Decode<'r, Postgres>>::decode(value)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_pack_and_come_back() {
        let long: Arc<str> = "{\"content\":\"line of text\\n\"}".repeat(40).into();
        let StoredResult::Packed(bytes) = StoredResult::Text(Arc::clone(&long)).pack() else {
            panic!("a long repetitive text packs")
        };
        assert!(bytes.len() < long.len() / 4, "{} of {}", bytes.len(), long.len());
        assert_eq!(unpack(&bytes).unwrap(), &*long);
        assert_eq!(StoredResult::Packed(bytes).json().unwrap(), &*long);
    }

    #[test]
    fn short_texts_stay_text() {
        let short: Arc<str> = "{\"content\":\"ok\"}".repeat(PACK_FROM / 16 - 1).into();
        assert!(short.len() < PACK_FROM);
        assert!(matches!(StoredResult::Text(short).pack(), StoredResult::Text(_)));
    }

    #[test]
    fn a_corrupt_packed_result_is_an_error_not_a_panic() {
        for bytes in [
            &[][..],
            &[9, 1, 2][..],
            &[ZSTD, 0xff, 0xff, 0xff][..],
            &[ZSTD, 0x28, 0xb5, 0x2f, 0xfd, 0, 0][..],
        ] {
            assert!(matches!(unpack(bytes), Err(JournalError::Corrupt(_))), "{bytes:?}");
        }
    }
}
