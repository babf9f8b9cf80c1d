ALTER TABLE "runs" ADD COLUMN "context_bytes" integer;--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "context_short_bytes" integer;--> statement-breakpoint
-- the succeeded runs' transcripts kept so far: their sizes as a later run of their thread is sent them
UPDATE "runs" SET ("context_bytes", "context_short_bytes") = (
  SELECT sum(octet_length(m."content") + coalesce(octet_length(m."tool_calls"::text), 0)),
         sum(CASE WHEN m."role" = 'tool' AND octet_length(m."content") > 1000
               THEN octet_length(left(m."content", 1000)) + 64 ELSE octet_length(m."content") END
             + coalesce(octet_length(m."tool_calls"::text), 0))
  FROM "run_messages" m WHERE m."run_id" = "runs"."id")
WHERE "status" = 'succeeded';
