ALTER TABLE "runs" DROP CONSTRAINT "runs_status_check";--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "suspended" jsonb;--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "resume_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "runs_waiting_idx" ON "runs" USING btree ("resume_at") WHERE status = 'requires_action';--> statement-breakpoint
ALTER TABLE "runs" ADD CONSTRAINT "runs_status_check" CHECK ("runs"."status" in ('queued', 'running', 'requires_action', 'succeeded', 'failed', 'cancelled'));