-- A tenant's calls newest first without a filter (the API's and the terminal app's listing) walked
-- and sorted all of the tenant's rows: this index serves `ORDER BY attempted_at DESC` directly.
CREATE INDEX IF NOT EXISTS tool_call_attempts_tenant_time ON tool_call_attempts (tenant, attempted_at);
