// Produces count records with a librdkafka producer while librdkafka
// consumers using the KIP-848 consumer group protocol (group.protocol=consumer)
// consume them as members join, leave and come back; checks that every
// record is consumed and no partition is ever owned by two members.
// Usage: node kip848.js host:port topic group count assignor
'use strict'
const Kafka = require('node-rdkafka')

const [broker, topic, group, countArg, assignor] = process.argv.slice(2)
const total = parseInt(countArg, 10)
const owner = new Map() // partition → member
const seen = new Set()
const violations = []
const log = (...a) => console.log(...a)

function member (name) {
  const c = new Kafka.KafkaConsumer({
    'bootstrap.servers': broker,
    'group.id': group,
    'group.protocol': 'consumer',
    'group.remote.assignor': assignor,
    'enable.auto.commit': true,
    'auto.commit.interval.ms': 200,
    // Offsets are stored as the test sees each record: with automatic
    // storing, librdkafka stores what it fetched for node-rdkafka's flowing
    // mode before the 'data' event runs, so a member leaving could commit
    // records the test never saw.
    'enable.auto.offset.store': false,
    ...(process.env.RDKAFKA_DEBUG ? { debug: process.env.RDKAFKA_DEBUG, event_cb: true } : {}),
    rebalance_cb: function (err, assignment) {
      const ps = assignment.map(a => a.partition)
      if (err.code === Kafka.CODES.ERRORS.ERR__ASSIGN_PARTITIONS) {
        for (const p of ps) {
          const cur = owner.get(p)
          if (cur !== undefined && cur !== name) violations.push(`partition ${p} assigned to ${name} while ${cur} owns it`)
          owner.set(p, name)
        }
        log(`${name} +[${ps}]`)
        try { this.incrementalAssign(assignment) } catch (e) { log(`${name} assign: ${e.message}`) }
      } else if (err.code === Kafka.CODES.ERRORS.ERR__REVOKE_PARTITIONS) {
        try { this.commitSync(null) } catch (e) { /* nothing consumed yet */ }
        for (const p of ps) if (owner.get(p) === name) owner.delete(p)
        log(`${name} -[${ps}]`)
        try { this.incrementalUnassign(assignment) } catch (e) { log(`${name} unassign: ${e.message}`) }
      } else {
        log(`${name} rebalance error ${err.code}`)
      }
    }
  }, { 'auto.offset.reset': 'earliest' })
  c.on('data', m => {
    if (m.key) seen.add(m.key.toString())
    try { c.offsetsStore([{ topic: m.topic, partition: m.partition, offset: m.offset + 1 }]) } catch (e) { /* revoked meanwhile */ }
  })
  c.on('event.error', e => log(`${name} error: ${e.message}`))
  if (process.env.RDKAFKA_DEBUG) c.on('event.log', l => log(`${name} ${l.fac} ${l.message}`))
  return new Promise((resolve, reject) => {
    c.on('ready', () => {
      c.subscribe([topic])
      c.consume()
      resolve(c)
    })
    c.connect({}, err => { if (err) reject(err) })
  })
}

function assigned (c) {
  try { return c.assignments().length } catch (e) { return 0 }
}

function owned (name) { return [...owner.values()].filter(n => n === name).length }
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

async function until (what, cond, ms) {
  const deadline = Date.now() + ms
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; owners ${JSON.stringify([...owner])}`)
    await sleep(50)
  }
}

// leave makes a member leave the group and then disconnects it (giving up
// after 15 s). It unsubscribes first and waits for its partitions to be
// revoked: disconnecting a member in the middle of a reconciliation would
// let an assignment arrive while node-rdkafka refuses incrementalAssign on
// a closing consumer ("KafkaConsumer is disconnected"), and librdkafka
// would wait for that assignment forever, its close never completing (and
// the process then hanging at exit).
function leave (c, name) {
  return new Promise(resolve => {
    const done = () => {
      for (const [p, n] of owner) if (n === name) owner.delete(p)
      resolve()
    }
    const timer = setTimeout(() => { log(`${name}: disconnect timed out`); done() }, 15000)
    try { c.unsubscribe() } catch (e) { log(`${name} unsubscribe: ${e.message}`) }
    until(`${name} to hand back its partitions`, () => owned(name) === 0 && assigned(c) === 0, 10000)
      .catch(e => log(e.message))
      .then(() => c.disconnect(() => { clearTimeout(timer); done() }))
  })
}

// Warnings librdkafka logs when a produce answer names a partition leader
// it does not know (KIP-951's CurrentLeader read as "broker 0 now leads").
let cacheWarnings = 0

// produce writes records total/4 at a time, one chunk per call.
function producer () {
  const p = new Kafka.Producer({ 'bootstrap.servers': broker, 'compression.codec': 'lz4', 'linger.ms': 5, dr_cb: true, event_cb: true })
  p.on('event.log', l => {
    if (/not found in cache/.test(l.message)) {
      cacheWarnings++
      log(`producer: ${l.message}`)
    }
  })
  let acked = 0
  p.on('delivery-report', (err) => { if (err) log(`delivery error: ${err.message}`); else acked++ })
  p.setPollInterval(20)
  let next = 0
  return new Promise((resolve, reject) => {
    p.on('ready', () => resolve({
      async chunk () {
        const end = Math.min(total, next + total / 4)
        for (; next < end; next++) p.produce(topic, null, Buffer.from('v'), Buffer.from(String(next)))
        await until('the chunk to be acknowledged', () => acked === next, 60000)
      },
      close: () => new Promise(resolve => p.disconnect(resolve))
    }))
    p.connect({}, err => { if (err) reject(err) })
  })
}

async function main () {
  const prod = await producer()
  const a = await member('a')
  const b = await member('b')
  await prod.chunk()
  await until('a and b to share 16 partitions', () => owner.size === 16 && owned('a') > 0 && owned('b') > 0, 60000)
  const c = await member('c')
  await prod.chunk()
  await until('three members to share', () => owner.size === 16 && owned('c') > 0, 60000)
  await leave(b, 'b')
  await prod.chunk()
  await until('a and c to take over', () => owner.size === 16, 60000)
  const b2 = await member('b2')
  await until('b2 to get partitions', () => owner.size === 16 && owned('b2') > 0, 60000)
  await prod.chunk()
  await until('every record consumed', () => seen.size >= total, 120000)
  await prod.close()
  await sleep(1000) // a last auto-commit
  for (const [m, n] of [[a, 'a'], [c, 'c'], [b2, 'b2']]) await leave(m, n)
  if (violations.length) {
    console.log('violations:\n' + violations.join('\n'))
    process.exit(1)
  }
  console.log(`rdkafka kip848 ok: ${seen.size} records, librdkafka ${Kafka.librdkafkaVersion}, cache warnings: ${cacheWarnings}`)
  process.exit(0)
}

main().catch(e => { console.error(e); process.exit(1) })
