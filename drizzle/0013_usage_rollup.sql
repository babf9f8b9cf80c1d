-- Contract 11's fleet usage, kept as runs finish: a run reaching succeeded, failed or
-- cancelled adds itself to its quarter hour (UTC) of usage_slots and usage_slot_groups, in
-- the transaction that finishes it, whichever code path finishes it (the worker, a cancel,
-- the sweeper).
CREATE FUNCTION usage_add_finished_run() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  -- v_ names: a variable named like a column would make ON CONFLICT (…, slot) ambiguous
  v_slot timestamptz;
  v_ok int;
  v_bad int;
  v_ms bigint;
BEGIN
  IF NEW.status NOT IN ('succeeded', 'failed', 'cancelled') OR NEW.finished_at IS NULL THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.status IN ('succeeded', 'failed', 'cancelled') THEN
    RETURN NULL;
  END IF;
  v_slot := date_bin('15 minutes', NEW.finished_at, timestamptz '2000-01-01 00:00:00+00');
  v_ok := (NEW.status = 'succeeded')::int;
  v_bad := (NEW.status = 'failed')::int;
  v_ms := greatest(0, floor(extract(epoch FROM NEW.finished_at - coalesce(NEW.started_at, NEW.finished_at)) * 1000))::bigint;
  INSERT INTO usage_slots AS u (org_id, slot, runs, succeeded, failed, input_tokens, output_tokens, duration_ms)
  VALUES (NEW.org_id, v_slot, 1, v_ok, v_bad, coalesce(NEW.input_tokens, 0), coalesce(NEW.output_tokens, 0), v_ms)
  ON CONFLICT (org_id, slot) DO UPDATE SET
    runs = u.runs + 1, succeeded = u.succeeded + EXCLUDED.succeeded, failed = u.failed + EXCLUDED.failed,
    input_tokens = u.input_tokens + EXCLUDED.input_tokens, output_tokens = u.output_tokens + EXCLUDED.output_tokens,
    duration_ms = u.duration_ms + EXCLUDED.duration_ms;
  INSERT INTO usage_slot_groups AS u (org_id, slot, engine, model, user_id, runs, succeeded, failed, input_tokens, output_tokens, duration_ms)
  VALUES (NEW.org_id, v_slot, NEW.engine, coalesce(NEW.model, ''), coalesce(NEW.user_id, ''), 1, v_ok, v_bad,
          coalesce(NEW.input_tokens, 0), coalesce(NEW.output_tokens, 0), v_ms)
  ON CONFLICT (org_id, slot, engine, model, user_id) DO UPDATE SET
    runs = u.runs + 1, succeeded = u.succeeded + EXCLUDED.succeeded, failed = u.failed + EXCLUDED.failed,
    input_tokens = u.input_tokens + EXCLUDED.input_tokens, output_tokens = u.output_tokens + EXCLUDED.output_tokens,
    duration_ms = u.duration_ms + EXCLUDED.duration_ms;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER runs_usage_on_insert AFTER INSERT ON runs FOR EACH ROW EXECUTE FUNCTION usage_add_finished_run();
--> statement-breakpoint
CREATE TRIGGER runs_usage_on_finish AFTER UPDATE OF status ON runs FOR EACH ROW EXECUTE FUNCTION usage_add_finished_run();
--> statement-breakpoint
-- the runs that finished before this migration
INSERT INTO usage_slot_groups (org_id, slot, engine, model, user_id, runs, succeeded, failed, input_tokens, output_tokens, duration_ms)
SELECT org_id, date_bin('15 minutes', finished_at, timestamptz '2000-01-01 00:00:00+00'), engine, coalesce(model, ''), coalesce(user_id, ''),
       count(*), count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed'),
       coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
       coalesce(sum(greatest(0, floor(extract(epoch FROM finished_at - coalesce(started_at, finished_at)) * 1000))), 0)::bigint
FROM runs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
GROUP BY 1, 2, 3, 4, 5;
--> statement-breakpoint
INSERT INTO usage_slots (org_id, slot, runs, succeeded, failed, input_tokens, output_tokens, duration_ms)
SELECT org_id, slot, sum(runs), sum(succeeded), sum(failed), sum(input_tokens), sum(output_tokens), sum(duration_ms)
FROM usage_slot_groups
GROUP BY 1, 2;
