-- Fleet usage at two grains (src/platform/tables.ts): whole hours, read for every hour no
-- local midnight splits, and the quarter hours by group, read only for the hours one does.
-- The ungrouped quarter hours (usage_slots) are no longer needed: a split hour's 4 quarters
-- are summed from usage_slot_groups.
CREATE TABLE "usage_hour_groups" (
	"org_id" text NOT NULL,
	"hour" timestamp with time zone NOT NULL,
	"engine" text NOT NULL,
	"model" text NOT NULL,
	"user_id" text NOT NULL,
	"runs" integer NOT NULL,
	"succeeded" integer NOT NULL,
	"failed" integer NOT NULL,
	"input_tokens" bigint NOT NULL,
	"output_tokens" bigint NOT NULL,
	"duration_ms" bigint NOT NULL,
	CONSTRAINT "usage_hour_groups_org_id_hour_engine_model_user_id_pk" PRIMARY KEY("org_id","hour","engine","model","user_id")
);
--> statement-breakpoint
CREATE TABLE "usage_hours" (
	"org_id" text NOT NULL,
	"hour" timestamp with time zone NOT NULL,
	"runs" integer NOT NULL,
	"succeeded" integer NOT NULL,
	"failed" integer NOT NULL,
	"input_tokens" bigint NOT NULL,
	"output_tokens" bigint NOT NULL,
	"duration_ms" bigint NOT NULL,
	CONSTRAINT "usage_hours_org_id_hour_pk" PRIMARY KEY("org_id","hour")
);
--> statement-breakpoint
ALTER TABLE "usage_hour_groups" ADD CONSTRAINT "usage_hour_groups_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "usage_hours" ADD CONSTRAINT "usage_hours_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION usage_add_finished_run() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  -- v_ names: a variable named like a column would make ON CONFLICT (…, slot) ambiguous
  v_slot timestamptz;
  v_hour timestamptz;
  v_ok int;
  v_bad int;
  v_ms bigint;
  v_model text;
  v_user text;
  v_in bigint;
  v_out bigint;
BEGIN
  IF NEW.status NOT IN ('succeeded', 'failed', 'cancelled') OR NEW.finished_at IS NULL THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.status IN ('succeeded', 'failed', 'cancelled') THEN
    RETURN NULL;
  END IF;
  -- date_bin, not date_trunc: date_trunc would cut hours in the session's time zone
  v_slot := date_bin('15 minutes', NEW.finished_at, timestamptz '2000-01-01 00:00:00+00');
  v_hour := date_bin('1 hour', NEW.finished_at, timestamptz '2000-01-01 00:00:00+00');
  v_ok := (NEW.status = 'succeeded')::int;
  v_bad := (NEW.status = 'failed')::int;
  v_ms := greatest(0, floor(extract(epoch FROM NEW.finished_at - coalesce(NEW.started_at, NEW.finished_at)) * 1000))::bigint;
  v_model := coalesce(NEW.model, '');
  v_user := coalesce(NEW.user_id, '');
  v_in := coalesce(NEW.input_tokens, 0);
  v_out := coalesce(NEW.output_tokens, 0);
  INSERT INTO usage_hours AS u (org_id, hour, runs, succeeded, failed, input_tokens, output_tokens, duration_ms)
  VALUES (NEW.org_id, v_hour, 1, v_ok, v_bad, v_in, v_out, v_ms)
  ON CONFLICT (org_id, hour) DO UPDATE SET
    runs = u.runs + 1, succeeded = u.succeeded + EXCLUDED.succeeded, failed = u.failed + EXCLUDED.failed,
    input_tokens = u.input_tokens + EXCLUDED.input_tokens, output_tokens = u.output_tokens + EXCLUDED.output_tokens,
    duration_ms = u.duration_ms + EXCLUDED.duration_ms;
  INSERT INTO usage_hour_groups AS u (org_id, hour, engine, model, user_id, runs, succeeded, failed, input_tokens, output_tokens, duration_ms)
  VALUES (NEW.org_id, v_hour, NEW.engine, v_model, v_user, 1, v_ok, v_bad, v_in, v_out, v_ms)
  ON CONFLICT (org_id, hour, engine, model, user_id) DO UPDATE SET
    runs = u.runs + 1, succeeded = u.succeeded + EXCLUDED.succeeded, failed = u.failed + EXCLUDED.failed,
    input_tokens = u.input_tokens + EXCLUDED.input_tokens, output_tokens = u.output_tokens + EXCLUDED.output_tokens,
    duration_ms = u.duration_ms + EXCLUDED.duration_ms;
  INSERT INTO usage_slot_groups AS u (org_id, slot, engine, model, user_id, runs, succeeded, failed, input_tokens, output_tokens, duration_ms)
  VALUES (NEW.org_id, v_slot, NEW.engine, v_model, v_user, 1, v_ok, v_bad, v_in, v_out, v_ms)
  ON CONFLICT (org_id, slot, engine, model, user_id) DO UPDATE SET
    runs = u.runs + 1, succeeded = u.succeeded + EXCLUDED.succeeded, failed = u.failed + EXCLUDED.failed,
    input_tokens = u.input_tokens + EXCLUDED.input_tokens, output_tokens = u.output_tokens + EXCLUDED.output_tokens,
    duration_ms = u.duration_ms + EXCLUDED.duration_ms;
  RETURN NULL;
END
$$;
--> statement-breakpoint
-- what the quarter hours already hold
INSERT INTO usage_hour_groups (org_id, hour, engine, model, user_id, runs, succeeded, failed, input_tokens, output_tokens, duration_ms)
SELECT org_id, date_bin('1 hour', slot, timestamptz '2000-01-01 00:00:00+00'), engine, model, user_id,
       sum(runs), sum(succeeded), sum(failed), sum(input_tokens), sum(output_tokens), sum(duration_ms)
FROM usage_slot_groups
GROUP BY 1, 2, 3, 4, 5;
--> statement-breakpoint
INSERT INTO usage_hours (org_id, hour, runs, succeeded, failed, input_tokens, output_tokens, duration_ms)
SELECT org_id, hour, sum(runs), sum(succeeded), sum(failed), sum(input_tokens), sum(output_tokens), sum(duration_ms)
FROM usage_hour_groups
GROUP BY 1, 2;
--> statement-breakpoint
DROP TABLE "usage_slots" CASCADE;
