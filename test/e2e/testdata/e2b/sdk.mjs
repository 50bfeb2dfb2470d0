// sdk.mjs drives reins' E2B-compatible endpoint with the unmodified e2b
// SDK from npm (test/node/package.json pins it), as a user's program
// would: E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY point it at reins.
// Every call's result is checked; the first that is wrong ends the script
// with a non-zero exit and what failed. REINS_PORT_ADDR is reins' API
// address, where port hosts are served, and REINS_TOKEN the token port
// URLs need.
import http from 'node:http'
import { AuthenticationError, CommandExitError, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'

const portAddr = process.env.REINS_PORT_ADDR
let step = ''

function check(cond, what) {
  if (!cond) throw new Error(`${step}: ${what}`)
}

async function run(name, fn) {
  step = name
  const t0 = Date.now()
  await fn()
  console.log(`ok   ${name} (${Date.now() - t0} ms)`)
}

async function throws(fn, cls, what) {
  try {
    await fn()
  } catch (e) {
    check(e instanceof cls, `${what}: threw ${e?.constructor?.name}: ${e?.message}, want ${cls.name}`)
    return e
  }
  check(false, `${what}: did not throw`)
}

// get fetches http://host/ through reins' port proxy: the host names the
// sandbox and port, the connection goes to reins' API address.
function get(host, token) {
  const [hostname, port] = portAddr.split(':')
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, path: '/', headers: { Host: host, Authorization: `Bearer ${token}` } }, (res) => {
      let body = ''
      res.on('data', (c) => (body += c))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

const tag = `t${process.pid}${Date.now()}`
let sbx

async function main() {
  await run('a wrong key is refused', async () => {
    await throws(() => Sandbox.create('base', { apiKey: 'e2b_' + '0'.repeat(64) }), AuthenticationError, 'create with a wrong key')
  })

  await run('create with metadata, envs and a timeout', async () => {
    sbx = await Sandbox.create('base', { metadata: { suite: 'e2b-sdk', tag }, envs: { GREETING: 'hello from e2b' }, timeoutMs: 120_000 })
    check(/^[0-9a-f]+$/.test(sbx.sandboxId), `sandbox id ${sbx.sandboxId}`)
  })

  await run('getInfo', async () => {
    const info = await sbx.getInfo()
    check(info.sandboxId === sbx.sandboxId, `id ${info.sandboxId}`)
    check(info.templateId === 'base', `templateId ${info.templateId}`)
    check(info.state === 'running', `state ${info.state}`)
    check(info.metadata.tag === tag && info.metadata.suite === 'e2b-sdk', `metadata ${JSON.stringify(info.metadata)}`)
    check(!('e2b.template' in info.metadata), `reins' own label shows in metadata: ${JSON.stringify(info.metadata)}`)
    const ttl = info.endAt - info.startedAt
    check(ttl > 110_000 && ttl < 130_000, `endAt - startedAt = ${ttl} ms, want about 120 s`)
    check(info.envdVersion === '0.5.7', `envdVersion ${info.envdVersion}`)
    check(info.cpuCount >= 1 && info.memoryMB > 0, `cpuCount ${info.cpuCount}, memoryMB ${info.memoryMB}`)
  })

  await run('setTimeout', async () => {
    await sbx.setTimeout(600_000)
    const info = await sbx.getInfo()
    const left = info.endAt - Date.now()
    check(left > 590_000 && left < 610_000, `${left} ms left after setTimeout(600 s)`)
  })

  await run('list with a metadata filter, and paging', async () => {
    const items = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
    check(items.length === 1 && items[0].sandboxId === sbx.sandboxId, `list by tag: ${JSON.stringify(items)}`)
    check(items[0].state === 'running' && items[0].metadata.suite === 'e2b-sdk', `entry ${JSON.stringify(items[0])}`)
    const none = await Sandbox.list({ query: { metadata: { tag: tag + 'x' } } }).nextItems()
    check(none.length === 0, `list by another tag: ${JSON.stringify(none)}`)
    const paused = await Sandbox.list({ query: { metadata: { tag }, state: ['paused'] } }).nextItems()
    check(paused.length === 0, `paused ones before a pause: ${JSON.stringify(paused)}`)
    const pager = Sandbox.list({ query: { metadata: { tag } }, limit: 1 })
    const page = await pager.nextItems()
    check(page.length === 1 && !pager.hasNext, `a page of 1 of 1: ${page.length}, hasNext ${pager.hasNext}`)
  })

  await run('updateNetwork', async () => {
    await sbx.updateNetwork({ allowInternetAccess: false })
    const info = await sbx.getInfo()
    check(info.allowInternetAccess === false, `allowInternetAccess after closing it: ${info.allowInternetAccess}`)
    await sbx.updateNetwork({ allowInternetAccess: true })
    check((await sbx.getInfo()).allowInternetAccess === true, 'allowInternetAccess after opening it')
  })

  await run('getMetrics', async () => {
    const m = await sbx.getMetrics()
    check(m.length === 1, `${m.length} samples`)
    check(m[0].memTotal > 0 && m[0].memUsed > 0 && m[0].cpuCount >= 1, `sample ${JSON.stringify(m[0])}`)
    check(m[0].diskUsed > 0 && m[0].diskUsed < m[0].diskTotal, `disk in the sample ${JSON.stringify(m[0])}`)
    check(m[0].cpuUsedPct >= 0 && m[0].cpuUsedPct <= 100, `CPU in the sample ${JSON.stringify(m[0])}`)
  })

  await run('getHost', async () => {
    const host = sbx.getHost(8000)
    check(host === `8000-${sbx.sandboxId}.localhost:${portAddr.split(':')[1]}`, `getHost(8000) = ${host}`)
  })

  await run('a call reins does not implement', async () => {
    const e = await throws(() => sbx.createSnapshot(), SandboxError, 'createSnapshot')
    check(e.message.includes('501') && e.message.includes('/snapshots'), `message ${e.message}`)
  })

  await dataPlane()

  await run('pause', async () => {
    check((await sbx.pause()) === true, 'pause of a running sandbox')
    const info = await Sandbox.getInfo(sbx.sandboxId)
    check(info.state === 'paused', `state after pause ${info.state}`)
    const paused = await Sandbox.list({ query: { metadata: { tag }, state: ['paused'] } }).nextItems()
    check(paused.length === 1, `paused list: ${JSON.stringify(paused)}`)
    check((await sbx.pause()) === false, 'pause of a paused sandbox')
  })

  await run('connect resumes', async () => {
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 900_000 })
    check(again.sandboxId === sbx.sandboxId, `connected to ${again.sandboxId}`)
    const info = await again.getInfo()
    check(info.state === 'running', `state after connect ${info.state}`)
    const left = info.endAt - Date.now()
    check(left > 890_000, `${left} ms left after connect with 900 s`)
    const r = await again.commands.run('cat /tmp/e2b-marker')
    check(r.stdout === 'kept\n', `a file written before the pause: ${JSON.stringify(r.stdout)}`)
    sbx = again
  })

  await run('kill', async () => {
    check((await sbx.kill()) === true, 'kill')
    check((await Sandbox.kill(sbx.sandboxId)) === false, 'a second kill finds nothing')
    await throws(() => Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError, 'getInfo of a killed sandbox')
    await throws(() => Sandbox.connect(sbx.sandboxId), SandboxNotFoundError, 'connect to a killed sandbox')
    const items = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
    check(items.length === 0, `list after kill: ${JSON.stringify(items)}`)
    sbx = undefined
  })
}

async function dataPlane() {
  await run('commands.run streams stdout and stderr', async () => {
    const out = []
    const errs = []
    const r = await sbx.commands.run('echo "$GREETING"; echo oops >&2; echo two', {
      onStdout: (d) => out.push(d),
      onStderr: (d) => errs.push(d),
    })
    check(r.exitCode === 0, `exit ${r.exitCode}`)
    check(out.join('') === 'hello from e2b\ntwo\n', `stdout chunks ${JSON.stringify(out)}`)
    check(errs.join('') === 'oops\n', `stderr chunks ${JSON.stringify(errs)}`)
    check(r.stdout === 'hello from e2b\ntwo\n' && r.stderr === 'oops\n', `result ${JSON.stringify(r)}`)
  })

  await run('a failing command throws CommandExitError', async () => {
    const e = await throws(() => sbx.commands.run('echo bad >&2; exit 3'), CommandExitError, 'exit 3')
    check(e.exitCode === 3 && e.stderr === 'bad\n', `exitCode ${e.exitCode}, stderr ${JSON.stringify(e.stderr)}`)
  })

  await run('files', async () => {
    await sbx.files.write('/tmp/e2b/a.txt', 'content of a')
    check((await sbx.files.read('/tmp/e2b/a.txt')) === 'content of a', 'read back')
    const entries = await sbx.files.list('/tmp/e2b')
    check(entries.some((e) => e.name === 'a.txt' && e.type === 'file'), `list ${JSON.stringify(entries)}`)
    check((await sbx.files.exists('/tmp/e2b/a.txt')) === true, 'exists')
    check((await sbx.files.makeDir('/tmp/e2b/d')) === true, 'makeDir')
    await sbx.files.rename('/tmp/e2b/a.txt', '/tmp/e2b/d/b.txt')
    check((await sbx.files.exists('/tmp/e2b/a.txt')) === false, 'the old name after rename')
    check((await sbx.files.read('/tmp/e2b/d/b.txt')) === 'content of a', 'the new name after rename')
    await sbx.files.remove('/tmp/e2b/d/b.txt')
    check((await sbx.files.exists('/tmp/e2b/d/b.txt')) === false, 'exists after remove')
    await sbx.files.write('/tmp/e2b-marker', 'kept\n')
  })

  await run('a background command, listed and killed', async () => {
    const h = await sbx.commands.run('sleep 600', { background: true })
    check(h.pid > 0, `pid ${h.pid}`)
    const list = await sbx.commands.list()
    check(list.some((p) => p.pid === h.pid), `list ${JSON.stringify(list)}`)
    check((await sbx.commands.kill(h.pid)) === true, 'kill')
    // The kill is a signal: the process leaves the list once it is reaped.
    let after
    for (let i = 0; i < 50; i++) {
      after = await sbx.commands.list()
      if (!after.some((p) => p.pid === h.pid)) break
      await new Promise((r) => setTimeout(r, 100))
    }
    check(!after.some((p) => p.pid === h.pid), `list 5 s after kill ${JSON.stringify(after)}`)
  })

  await run('a server in the sandbox, through getHost and the port proxy', async () => {
    await sbx.commands.run(`node -e "require('http').createServer((q, s) => s.end('pong')).listen(8000)"`, { background: true })
    let res
    for (let i = 0; i < 100; i++) {
      res = await get(sbx.getHost(8000), process.env.REINS_TOKEN)
      if (res.status === 200) break
      await new Promise((r) => setTimeout(r, 100))
    }
    check(res.status === 200 && res.body === 'pong', `GET ${sbx.getHost(8000)}: ${res.status} ${res.body}`)
  })
}

try {
  await main()
  console.log('all calls checked')
} catch (e) {
  console.error(`FAIL ${e.stack || e}`)
  if (sbx) await sbx.kill().catch(() => {})
  process.exit(1)
}
