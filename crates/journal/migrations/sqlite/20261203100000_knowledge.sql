-- Knowledge bases: sources cut into chunks that partition their lines. A base belongs to a
-- tenant's person, or to the whole tenant (person ''). The knowledge-base tool ranks chunks with
-- its own BM25 index, built from these rows and rebuilt when a base's version moves (FTS5 ranked
-- 75 000 chunks in 32 ms at p50; the index in well under a millisecond: docs/benchmarks.md).
-- Times are Unix milliseconds.
CREATE TABLE kb_bases (
    tenant      TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    person      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    roots       TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL,
    version     BIGINT  NOT NULL DEFAULT 0,
    sources     BIGINT  NOT NULL DEFAULT 0,
    chunks      BIGINT  NOT NULL DEFAULT 0,
    bytes       BIGINT  NOT NULL DEFAULT 0,
    embedding_model TEXT,
    PRIMARY KEY (tenant, id)
);

CREATE UNIQUE INDEX kb_bases_name ON kb_bases (tenant, person, name);

CREATE TABLE kb_sources (
    tenant      TEXT    NOT NULL,
    base        TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    bytes       BIGINT  NOT NULL,
    chunks      BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, base, path)
);

CREATE TABLE kb_chunks (
    id          INTEGER PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    base        TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    ordinal     BIGINT  NOT NULL,
    heading     TEXT    NOT NULL,
    first_line  BIGINT  NOT NULL,
    last_line   BIGINT  NOT NULL,
    text        TEXT    NOT NULL,
    embedding   BLOB
);

CREATE INDEX kb_chunks_source ON kb_chunks (tenant, base, path, ordinal);
