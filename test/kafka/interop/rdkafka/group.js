// Runs members of one consumer group (librdkafka, the classic protocol or
// KIP-848's) that consume a topic and commit every second, as
// applications do by default, until the process gets SIGTERM or stdin
// closes. Prints "rdkafka group ready" once every member has partitions.
// Usage: node group.js host:port[,host:port...] topic group members classic|consumer
'use strict'
const Kafka = require('node-rdkafka')

const [brokers, topic, group, membersArg, protocol] = process.argv.slice(2)
const count = parseInt(membersArg, 10)
const log = (...a) => console.log(...a)
const assigned = new Set()
const consumers = []

function member (name) {
  const conf = {
    'bootstrap.servers': brokers,
    'group.id': group,
    'enable.auto.commit': true,
    'auto.commit.interval.ms': 1000,
    'session.timeout.ms': 10000,
    ...(process.env.RDKAFKA_DEBUG ? { debug: process.env.RDKAFKA_DEBUG, event_cb: true } : {}),
    rebalance_cb: function (err, assignment) {
      const incremental = this.rebalanceProtocol() === 'COOPERATIVE'
      if (err.code === Kafka.CODES.ERRORS.ERR__ASSIGN_PARTITIONS) {
        if (assignment.length > 0) assigned.add(name)
        log(`${name} +[${assignment.map(a => a.partition)}]`)
        try { incremental ? this.incrementalAssign(assignment) : this.assign(assignment) } catch (e) { log(`${name} assign: ${e.message}`) }
      } else if (err.code === Kafka.CODES.ERRORS.ERR__REVOKE_PARTITIONS) {
        log(`${name} -[${assignment.map(a => a.partition)}]`)
        try { incremental ? this.incrementalUnassign(assignment) : this.unassign() } catch (e) { log(`${name} unassign: ${e.message}`) }
      } else {
        log(`${name} rebalance error ${err.code}`)
      }
      if (assigned.size === count) log('rdkafka group ready')
    }
  }
  if (protocol === 'consumer') {
    conf['group.protocol'] = 'consumer'
    delete conf['session.timeout.ms']
  }
  const c = new Kafka.KafkaConsumer(conf, { 'auto.offset.reset': 'earliest' })
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

function stop () {
  log('rdkafka group stopping')
  // A member's close can hang when librdkafka hands it an assignment while
  // it disconnects: the caller kills the process after a while.
  Promise.all(consumers.map(c => new Promise(resolve => c.disconnect(() => resolve()))))
    .then(() => process.exit(0))
}

process.on('SIGTERM', stop)
process.stdin.on('end', stop)
process.stdin.resume()

;(async () => {
  for (let i = 0; i < count; i++) consumers.push(await member(`member${i}`))
})().catch(e => { log(`rdkafka group failed: ${e.message}`); process.exit(1) })
