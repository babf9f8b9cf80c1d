import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { conflict, notFound, validationFailed } from '../../plugins/errors.js'
import { sendStored } from '../../plugins/idempotency/index.js'
import { errorResponses, IdempotencyKeyHeader } from '../../schemas/common.js'
import {
  CreateProjectBody,
  CreateTaskBody,
  IdParams,
  ListProjectsQuery,
  ListTasksQuery,
  MoveTaskBody,
  ProjectEnvelope,
  ProjectPage,
  RunTaskBody,
  TaskEnvelope,
  TaskPage,
  TaskRunReply,
  UpdateProjectBody,
  UpdateTaskBody
} from '../../schemas/tasks.js'
import { principalOf, realUserId } from '../auth/principal.js'
import {
  createProject,
  deleteProject,
  getProject,
  listProjects,
  projectToWire,
  updateProject
} from './projects-repo.js'
import {
  createTask,
  deleteTask,
  getTask,
  listTasks,
  moveTask,
  startTaskRun,
  taskToWire,
  updateTask,
  type TaskRefusal,
  type TaskRow
} from './tasks-repo.js'

const PROJECTS = ['projects']
const TASKS = ['tasks']

const noProject = () => notFound('no such project in this organization')
const noTask = () => notFound('no such task in this organization')

function refusal(r: TaskRefusal): Error {
  switch (r.refused) {
    case 'missing':
      return noTask()
    case 'stale':
      return conflict(`the task is at revision ${r.current}; read it again and retry`)
    case 'no_project':
      return notFound('no such project in this organization (projectId)')
    case 'no_assignee':
      return notFound('no such member of this organization (assigneeId)')
    case 'no_anchor':
      return notFound(`no such task in this organization (${r.field})`)
    case 'anchor_elsewhere':
      return conflict(`the ${r.field} task is not in that column (it moved meanwhile?)`)
    case 'anchor_is_self':
      return validationFailed([{ path: '/body', message: 'a task cannot be placed next to itself' }])
    case 'not_neighbours':
      return conflict('before and after are not neighbours in that column (the board changed meanwhile?)')
    case 'busy':
      return conflict('that place in the column was taken by other moves again and again; retry')
  }
}

const settled = (result: TaskRow | TaskRefusal): TaskRow => {
  if ('refused' in result) throw refusal(result)
  return result
}

/** Projects and the task board (fractional positions, revisions, task runs). */
const tasksRoutes: FastifyPluginAsyncTypebox = async (app) => {
  // ---- projects -----------------------------------------------------------------

  app.post(
    '/projects',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createProject',
        tags: PROJECTS,
        summary: 'Create a project',
        description: 'Creates a project, which holds a task board.',
        body: CreateProjectBody,
        response: { 201: ProjectEnvelope, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const project = await createProject(app.db, principal.orgId, {
        name: request.body.name,
        description: request.body.description ?? '',
        createdBy: realUserId(principal)
      })
      return reply.code(201).send({ project: projectToWire(project) })
    }
  )

  app.get(
    '/projects',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listProjects',
        tags: PROJECTS,
        summary: 'Projects of the org, newest first; `archived` filters',
        description: "Pages through the organization's projects, newest first, with or without archived ones.",
        querystring: ListProjectsQuery,
        response: { 200: ProjectPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const q = request.query
      const page = await listProjects(app.db, orgId, { archived: q.archived, limit: q.limit ?? 50, cursor: q.cursor })
      return { items: page.items.map(projectToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/projects/:id',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getProject',
        tags: PROJECTS,
        summary: 'One project',
        description: 'Returns one project with its name, description and, when archived, the time it was archived.',
        params: IdParams,
        response: { 200: ProjectEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const project = await getProject(app.db, orgId, request.params.id)
      if (!project) throw noProject()
      return { project: projectToWire(project) }
    }
  )

  app.patch(
    '/projects/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'updateProject',
        tags: PROJECTS,
        summary: 'Rename, describe, archive (`archived: true`) or restore (`archived: false`) a project',
        description: "Changes a project's name or description, or archives or restores it.",
        params: IdParams,
        body: UpdateProjectBody,
        response: { 200: ProjectEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const project = await updateProject(app.db, orgId, request.params.id, request.body)
      if (!project) throw noProject()
      return { project: projectToWire(project) }
    }
  )

  app.delete(
    '/projects/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deleteProject',
        tags: PROJECTS,
        summary: 'Delete a project and its tasks (archive it to keep them)',
        description: 'Deletes a project together with all of its tasks.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      if (!(await deleteProject(app.db, orgId, request.params.id))) throw noProject()
      return reply.code(204).send(null)
    }
  )

  // ---- tasks --------------------------------------------------------------------

  app.post(
    '/tasks',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createTask',
        tags: TASKS,
        summary: 'Create a task, last in its column',
        description: 'Creates a task in a project, placed last in the column of its status.',
        body: CreateTaskBody,
        response: { 201: TaskEnvelope, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const b = request.body
      const task = settled(
        await createTask(app.db, principal.orgId, {
          title: b.title,
          description: b.description ?? '',
          status: b.status ?? 'todo',
          projectId: b.projectId ?? null,
          assigneeId: b.assigneeId ?? null,
          createdBy: realUserId(principal)
        })
      )
      return reply.code(201).send({ task: taskToWire(task) })
    }
  )

  app.get(
    '/tasks',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listTasks',
        tags: TASKS,
        summary: 'Tasks by status (todo, doing, done), then position; `projectId` and `status` filter',
        description:
          'Lists tasks column by column (todo, doing, done) in board order, optionally for one project or one status.',
        querystring: ListTasksQuery,
        response: { 200: TaskPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const q = request.query
      const page = await listTasks(app.db, orgId, {
        projectId: q.projectId,
        status: q.status,
        limit: q.limit ?? 50,
        cursor: q.cursor
      })
      return { items: page.items.map(taskToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/tasks/:id',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getTask',
        tags: TASKS,
        summary: 'One task',
        description: 'Returns one task with its status, board position, project, latest run and revision.',
        params: IdParams,
        response: { 200: TaskEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const task = await getTask(app.db, orgId, request.params.id)
      if (!task) throw noTask()
      return { task: taskToWire(task) }
    }
  )

  app.patch(
    '/tasks/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'updateTask',
        tags: TASKS,
        summary: 'Edit a task at `revision` (409 when stale); a new status or project puts it last in its new column',
        description:
          'Edits a task when the revision sent is its current one; a new status or project moves it to the end of its new column.',
        params: IdParams,
        body: UpdateTaskBody,
        response: { 200: TaskEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const { revision, ...change } = request.body
      return { task: taskToWire(settled(await updateTask(app.db, orgId, request.params.id, change, revision))) }
    }
  )

  app.delete(
    '/tasks/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deleteTask',
        tags: TASKS,
        summary: 'Delete a task',
        description: 'Deletes a task from its board; the runs started from it stay.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      if (!(await deleteTask(app.db, orgId, request.params.id))) throw noTask()
      return reply.code(204).send(null)
    }
  )

  app.post(
    '/tasks/:id/move',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'moveTask',
        tags: TASKS,
        summary: 'Move a task: directly above `before`, directly below `after`, or last; only the task is written',
        description:
          'Moves a task to a new place on the board, above or below another task or to the end of a column, writing only that task.',
        params: IdParams,
        body: MoveTaskBody,
        response: { 200: TaskEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const { revision, ...to } = request.body
      return { task: taskToWire(settled(await moveTask(app.db, orgId, request.params.id, to, revision))) }
    }
  )

  app.post(
    '/tasks/:id/run',
    {
      config: { idempotent: true, keyAccess: 'none' },
      schema: {
        operationId: 'runTask',
        tags: TASKS,
        summary:
          "Start a run on the task's title and description: the task goes to doing, and to done when the run succeeds",
        description:
          "Starts a run whose prompt is the task's title and description, moves the task to doing, and to done when the run succeeds.",
        headers: IdempotencyKeyHeader,
        params: IdParams,
        // every field is optional, and so is the body itself
        body: Type.Union([RunTaskBody, Type.Null()]),
        response: { 201: TaskRunReply, ...errorResponses(404, 429) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const task = await getTask(app.db, principal.orgId, request.params.id)
      if (!task) throw noTask()
      const prompt = [task.title, task.description].filter((part) => part.trim() !== '').join('\n\n')
      const answer = await app.runs.dispatch({
        principal,
        body: { ...request.body, prompt, metadata: { taskId: task.id } },
        idempotency: request.idempotency,
        log: request.log,
        attach: async (tx, run) => {
          const started = await startTaskRun(tx, principal.orgId, task.id, run.id)
          if (!started) throw noTask()
          return { task: taskToWire(started) }
        }
      })
      return sendStored(reply, answer)
    }
  )
}

export default tasksRoutes
