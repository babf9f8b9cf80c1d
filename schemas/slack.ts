import { Type } from 'typebox'
import { named, StrictObject } from './common.js'

export const ConnectSlackBody = named(
  'ConnectSlackBody',
  StrictObject(
    {
      botToken: Type.String({
        minLength: 1,
        maxLength: 512,
        pattern: '^[!-~]+$',
        description:
          "the app's bot token (xoxb-…; visible ASCII, as it travels in a header), checked with auth.test before it is kept"
      }),
      signingSecret: Type.String({
        minLength: 1,
        maxLength: 256,
        pattern: '^[!-~]+$',
        description: "the app's signing secret (Basic Information → App Credentials): events are verified with it"
      }),
      teamId: Type.String({
        minLength: 1,
        maxLength: 64,
        pattern: '^[A-Za-z0-9_-]+$',
        description: 'the workspace (team) id the token must belong to, e.g. T0123ABCD'
      })
    },
    { description: 'connects the org to a Slack workspace; the token and the secret are sealed and never returned' }
  )
)

/** The fields of an event this service reads; Slack sends many more, which are accepted and ignored. */
export const SlackEvent = Type.Object(
  {
    type: Type.String({ maxLength: 128 }),
    user: Type.Optional(Type.String({ maxLength: 128 })),
    bot_id: Type.Optional(Type.String({ maxLength: 128 })),
    subtype: Type.Optional(Type.String({ maxLength: 128 })),
    text: Type.Optional(Type.String()),
    ts: Type.Optional(Type.String({ maxLength: 64 })),
    thread_ts: Type.Optional(Type.String({ maxLength: 64 })),
    channel: Type.Optional(Type.String({ maxLength: 128 })),
    channel_type: Type.Optional(Type.String({ maxLength: 64 }))
  },
  { description: 'the inner event (app_mention, message, app_uninstalled, tokens_revoked, …)' }
)

export const SlackEventEnvelope = named(
  'SlackEventEnvelope',
  Type.Object(
    {
      type: Type.String({
        maxLength: 128,
        description: 'url_verification or event_callback (others are acknowledged and ignored)'
      }),
      team_id: Type.Optional(Type.String({ maxLength: 128 })),
      event_id: Type.Optional(Type.String({ maxLength: 128 })),
      challenge: Type.Optional(Type.String({ maxLength: 1024 })),
      event: Type.Optional(SlackEvent)
    },
    {
      description:
        "a request of Slack's Events API, signed with the app's signing secret (X-Slack-Signature, X-Slack-Request-Timestamp)"
    }
  )
)

/** The headers Slack signs every request with. */
export const SlackSignedHeaders = Type.Object({
  'x-slack-signature': Type.Optional(Type.String({ description: 'v0=<hex HMAC-SHA256 of v0:<timestamp>:<raw body>>' })),
  'x-slack-request-timestamp': Type.Optional(
    Type.String({ description: 'Unix seconds; refused more than 300 s from now either way' })
  )
})

export const SlackSignatureHeaders = Type.Object({
  ...SlackSignedHeaders.properties,
  'x-slack-retry-num': Type.Optional(
    Type.String({ description: 'set by Slack on a retry; a retried event starts nothing again' })
  )
})

export const SlackEventAck = named(
  'SlackEventAck',
  Type.Object(
    {
      challenge: Type.Optional(Type.String({ description: 'url_verification: the challenge sent' })),
      ok: Type.Optional(Type.Boolean({ description: 'an event callback: taken (a run started, or nothing to do)' }))
    },
    { description: "the ingress's acknowledgement" }
  )
)

/** The fields of an interaction this service reads; Slack sends many more, which are accepted and ignored. */
export const SlackInteractionPayload = Type.Object(
  {
    type: Type.String({
      maxLength: 128,
      description: 'block_actions (a button was clicked) is acted on; other interactions are acknowledged and ignored'
    }),
    team: Type.Optional(
      Type.Union([Type.Object({ id: Type.Optional(Type.String({ maxLength: 128 })) }), Type.Null()], {
        description: 'the workspace the click came from: its org decides'
      })
    ),
    user: Type.Optional(
      Type.Object({
        id: Type.Optional(
          Type.String({ maxLength: 128, description: 'the Slack user who clicked: recorded as `slack:<id>`' })
        ),
        team_id: Type.Optional(Type.String({ maxLength: 128 }))
      })
    ),
    actions: Type.Optional(
      Type.Array(
        Type.Object({
          action_id: Type.Optional(
            Type.String({ maxLength: 255, description: 'cairn_approve or cairn_deny (others are ignored)' })
          ),
          value: Type.Optional(Type.String({ maxLength: 2000, description: 'the approval id' }))
        }),
        { maxItems: 100 }
      )
    )
  },
  { description: 'the interaction, sent as JSON in the form field `payload`' }
)

export const SlackInteractionForm = named(
  'SlackInteraction',
  Type.Object(
    {
      payload: SlackInteractionPayload
    },
    {
      description:
        "a request of Slack's interactivity (application/x-www-form-urlencoded, the interaction as JSON in `payload`), signed with the app's signing secret like events"
    }
  )
)

export const SlackInteractionAck = Type.Null({
  description:
    'acknowledged, with an empty body (Slack wants one within 3 s); what was clicked is decided by then, the message is updated after'
})
