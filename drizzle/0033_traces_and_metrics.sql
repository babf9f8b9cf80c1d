ALTER TABLE "runs" ADD COLUMN "traceparent" text;--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD COLUMN "traceparent" text;--> statement-breakpoint
CREATE INDEX "memory_captures_dead_idx" ON "memory_captures" USING btree ("updated_at") WHERE "memory_captures"."state" = 'dead';--> statement-breakpoint
CREATE INDEX "tool_approvals_pending_idx" ON "tool_approvals" USING btree ("expires_at") WHERE "tool_approvals"."status" = 'pending';