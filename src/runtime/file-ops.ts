import { SandboxError } from './sandbox.js'

/**
 * The file tools (read_file, list_files, write_file) and purge, as one POSIX shell script
 * that runs inside the sandbox's confinement, exactly like a `shell` call: in bubblewrap
 * the kernel resolves every path in the sandbox's own view, where nothing of the host
 * but the read-only system directories exists. That is the boundary.
 *
 * Inside it, the script also keeps every call within the workspace, whatever a sandboxed
 * process does meanwhile: it enters each folder with `cd -P` and checks where it landed
 * with `pwd -P` (the working directory is then pinned to a folder inside; a rename can
 * move it only within the workspace's mount), never re-resolves a path by name, and
 * opens the last name with `dd`'s `nofollow` (O_NOFOLLOW). A link as the last name is
 * resolved and walked again the same way. A folder swapped for a link mid-call makes
 * the call refused, never redirected.
 *
 * Arguments: $1 the workspace as the script sees it, $2 the operation, $3 the path
 * (`./a/b`, already checked by `segments()`: no `..`, no absolute path), $4 the limit
 * (read: bytes; list: entries). Content to write comes on stdin. Exit codes 65-70 are
 * the tools' own refusals (fileOpError).
 */
export const FILE_OPS_SCRIPT = `
set -u
root=$1 op=$2 p=$3
inside() { case $1 in "$root"|"$root"/*) return 0 ;; esac; return 1; }
# walk PATH CREATE: enter every folder of PATH from the root; leave its last name in $name
walk() {
  cd -P -- "$root" 2>/dev/null || exit 65
  rest=$1
  while :; do
    case $rest in
      */*) part=\${rest%%/*} rest=\${rest#*/} ;;
      *) name=$rest; return 0 ;;
    esac
    [ -n "$part" ] || continue
    if [ "$2" = 1 ] && [ ! -e "$part" ] && [ ! -L "$part" ]; then mkdir -- "$part" 2>/dev/null; fi
    [ -e "$part" ] || { [ -L "$part" ] && exit 69; exit 65; }
    [ -d "$part" ] || exit 68
    cd -P -- "$part" 2>/dev/null || exit 68
    inside "$(pwd -P)" || exit 67
  done
}
# settle CREATE: while the last name is a link, walk to where it points, if that is inside
settle() {
  hops=0
  while [ -L "$name" ]; do
    hops=$((hops + 1))
    [ "$hops" -le 16 ] || exit 67
    target=$(realpath -m -- "$name" 2>/dev/null) || exit 69
    if [ "$target" = "$root" ]; then cd -P -- "$root" || exit 65; name=.; return 0; fi
    inside "$target" || exit 67
    walk "\${target#"$root"/}" "$1"
  done
}
case $op in
read)
  walk "$p" 0; settle 0
  [ -e "$name" ] || exit 65
  [ -f "$name" ] || exit 66
  size=$(stat -c %s -- "$name") || exit 65
  printf '%s\\n' "$size"
  exec dd if="$name" iflag=nofollow,count_bytes count="$4" bs=65536 status=none ;;
list)
  walk "$p/." 0
  find . -mindepth 1 -maxdepth 1 -printf '%P/%y/%s\\0' | LC_ALL=C sort -z -t / -k 1,1 | head -z -n "$4" ;;
write)
  walk "$p" 1; settle 1
  if [ -e "$name" ] && [ ! -f "$name" ]; then exit 66; fi
  umask 022
  dd of="$name" oflag=nofollow bs=65536 status=none || exit 70 ;;
purge)
  cd -P -- "$root" || exit 0
  chmod -R u+rwX . 2>/dev/null
  find . -mindepth 1 -delete ;;
esac
`

const CODES = {
  65: 'not_found',
  66: 'not_a_file',
  67: 'invalid_path',
  68: 'not_a_directory',
  69: 'not_found',
  70: 'io_error'
} as const

/** The SandboxError a file operation's exit code stands for; null for success. */
export function fileOpError(
  op: 'read' | 'list' | 'write',
  path: string,
  result: { exitCode: number | null; timedOut: boolean; stderr: string }
): SandboxError | null {
  if (result.exitCode === 0 && !result.timedOut) return null
  const shown = path === '' ? 'the workspace' : path
  switch (result.exitCode) {
    case 65:
      return new SandboxError(CODES[65], `${shown} does not exist`)
    case 66:
      return new SandboxError(
        CODES[66],
        op === 'write' ? `${shown} exists and is not a regular file` : `${shown} is not a file`
      )
    case 67:
      return new SandboxError(CODES[67], 'the path leaves the workspace')
    case 68:
      return new SandboxError(
        CODES[68],
        op === 'write' ? `a folder on the way to ${shown} is not a directory` : `${shown} is not a directory`
      )
    case 69:
      return new SandboxError(CODES[69], 'the link points nowhere')
    case 70:
      return new SandboxError(CODES[70], `could not write ${shown}: ${lastLine(result.stderr)}`)
  }
  if (result.timedOut) return new SandboxError('io_error', `${op} of ${shown} took too long (a FIFO or a busy file?)`)
  return new SandboxError('io_error', `could not ${op} ${shown}${result.stderr ? `: ${lastLine(result.stderr)}` : ''}`)
}

function lastLine(text: string): string {
  const lines = text.trim().split('\n')
  return (lines[lines.length - 1] ?? '').slice(0, 300)
}
