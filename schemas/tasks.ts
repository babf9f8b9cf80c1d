import { Type } from 'typebox'
import {
  CreatedBy,
  Id,
  IdParams,
  IsoDate,
  LiteralUnion,
  named,
  Nullable,
  Page,
  PageQuery,
  StrictObject
} from './common.js'
import { AgentOptions, Run } from './runs.js'

/** The board's columns, in the order lists show them. */
export const TASK_STATUSES = ['todo', 'doing', 'done'] as const

export const Project = named(
  'Project',
  Type.Object({
    id: Type.String(),
    name: Type.String(),
    description: Type.String(),
    archivedAt: Nullable(IsoDate),
    createdAt: IsoDate,
    updatedAt: IsoDate,
    createdBy: CreatedBy
  })
)
const ProjectName = Type.String({ minLength: 1, maxLength: 200, pattern: '\\S' })
const ProjectDescription = Type.String({ maxLength: 10_000 })
export const CreateProjectBody = named(
  'CreateProjectRequest',
  StrictObject({
    name: ProjectName,
    description: Type.Optional(ProjectDescription)
  })
)
export const UpdateProjectBody = named(
  'UpdateProjectRequest',
  StrictObject({
    name: Type.Optional(ProjectName),
    description: Type.Optional(ProjectDescription),
    archived: Type.Optional(Type.Boolean({ description: 'true sets archivedAt, false clears it' }))
  })
)
export const ProjectEnvelope = Type.Object({ project: Project })
export const ProjectPage = named('ProjectPage', Page(Project))
export const ListProjectsQuery = StrictObject({
  ...PageQuery,
  archived: Type.Optional(
    Type.Boolean({ description: 'true: archived projects only; false: active only; absent: all' })
  )
})

export const TaskStatus = LiteralUnion(TASK_STATUSES)
export const Task = named(
  'Task',
  Type.Object({
    id: Type.String(),
    title: Type.String(),
    description: Type.String(),
    status: TaskStatus,
    position: Type.String({ description: 'opaque; sorts the column (byte order)' }),
    projectId: Nullable(Type.String()),
    runId: Nullable(Type.String({ description: 'the latest run started from this task' })),
    assigneeId: Nullable(Type.String()),
    revision: Type.Integer({ minimum: 1 }),
    createdAt: IsoDate,
    updatedAt: IsoDate,
    createdBy: CreatedBy
  })
)
const Title = Type.String({ minLength: 1, maxLength: 500, pattern: '\\S' })
const Description = Type.String({ maxLength: 20_000 })
const Revision = Type.Integer({ minimum: 1, description: 'the revision this change is based on; a stale one is 409' })
export const CreateTaskBody = named(
  'CreateTaskRequest',
  StrictObject({
    title: Title,
    description: Type.Optional(Description),
    status: Type.Optional(TaskStatus),
    projectId: Type.Optional(Nullable(Id)),
    assigneeId: Type.Optional(Nullable(Id))
  })
)
export const UpdateTaskBody = named(
  'UpdateTaskRequest',
  StrictObject(
    {
      title: Type.Optional(Title),
      description: Type.Optional(Description),
      status: Type.Optional(TaskStatus),
      projectId: Type.Optional(Nullable(Id)),
      assigneeId: Type.Optional(Nullable(Id)),
      revision: Revision
    },
    { description: 'a new status or project puts the task last in its new column' }
  )
)
export const MoveTaskBody = named(
  'MoveTaskRequest',
  StrictObject(
    {
      status: TaskStatus,
      before: Type.Optional(Id),
      after: Type.Optional(Id),
      revision: Revision
    },
    {
      description:
        '`before: X` lands directly above X, `after: X` directly below X (both: between them, which must be neighbours), neither: last'
    }
  )
)
export const RunTaskBody = named(
  'RunTaskRequest',
  StrictObject({
    engine: Type.Optional(Type.String({ minLength: 1, maxLength: 64, pattern: '^[a-z0-9_-]+$' })),
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    ...AgentOptions
  })
)
export const TaskEnvelope = Type.Object({ task: Task })
export const TaskPage = named('TaskPage', Page(Task))
export const TaskRunReply = named('TaskRunReply', Type.Object({ run: Run, task: Task }))
export const ListTasksQuery = StrictObject({
  ...PageQuery,
  projectId: Type.Optional(Id),
  status: Type.Optional(TaskStatus)
})
export { IdParams }
