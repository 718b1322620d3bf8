{{/*
Whether a claim may take a row, for the probe of many tables in one
statement (DB.MayClaimEach, the prober of a relay over many tables): a
pending row, or a failed one past its backoff, among the rows without an
ordering key (the unordered index) or with one (the ordering index). It
does not walk the heads of the ordering keys as stalled.sql does, whose
recursive walk, planned for every table of the union at each poll, cost
about 0.3 ms of backend CPU per table (an idle relay over 100 tables: 17 %
of a core on the 2-core machine). So it may answer true with every
claimable row queued behind its key's head in flight (the claim then takes
none, as MySQL's may_claim.sql), never false with a row to claim.
*/ -}}
SELECT EXISTS (SELECT 1 FROM {{.Table}} o WHERE o.ordering_key IS NULL AND o.status IN ('pending', 'failed') AND o.available_at <= now())
	OR EXISTS (SELECT 1 FROM {{.Table}} e WHERE e.ordering_key IS NOT NULL AND {{template "unsettled"}}
		AND e.status IN ('pending', 'failed') AND e.available_at <= now())
