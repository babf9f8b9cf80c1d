#!/usr/bin/env node
// A terminal client for a run's shell: `node scripts/terminal.mjs <runId> [baseUrl]`.
// Keystrokes go out as binary frames (terminal input), window sizes as the JSON text
// frame `{"type":"resize",...}`, and whatever the shell prints comes back to stdout.
// Generic WebSocket clients (wscat) send typed lines as text frames, which the terminal
// reads as control messages, so they cannot drive the shell.
// Authentication: CAIRN_COOKIE (e.g. `cairn_session=…`) if set; otherwise the dev org,
// which answers loopback callers only.
import WebSocket from 'ws'

const [runId, base = 'http://localhost:3000'] = process.argv.slice(2)
if (!runId) {
  process.stderr.write('usage: node scripts/terminal.mjs <runId> [baseUrl]\n')
  process.exit(2)
}
const url = new URL(`/api/runs/${encodeURIComponent(runId)}/terminal`, base.replace(/^http/, 'ws'))
const headers = process.env.CAIRN_COOKIE ? { cookie: process.env.CAIRN_COOKIE } : {}
const socket = new WebSocket(url, { headers })

const resize = () => {
  if (socket.readyState === WebSocket.OPEN && process.stdout.isTTY) {
    socket.send(JSON.stringify({ type: 'resize', cols: process.stdout.columns, rows: process.stdout.rows }))
  }
}

socket.on('unexpected-response', (_request, response) => {
  let body = ''
  response.on('data', (chunk) => (body += chunk))
  response.on('end', () => {
    process.stderr.write(`refused: ${response.statusCode} ${body}\n`)
    process.exit(1)
  })
})
socket.on('open', () => {
  resize()
  process.stdout.on('resize', resize)
  if (process.stdin.isTTY) process.stdin.setRawMode(true)
  process.stdin.on('data', (data) => socket.send(data, { binary: true }))
})
socket.on('message', (data) => process.stdout.write(data))
socket.on('close', (code, reason) => {
  if (process.stdin.isTTY) process.stdin.setRawMode(false)
  process.stderr.write(`\r\nclosed (${code}${reason.length ? `: ${reason}` : ''})\n`)
  process.exit(0)
})
socket.on('error', (err) => {
  process.stderr.write(`${err.message}\n`)
  process.exit(1)
})
