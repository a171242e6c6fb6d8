// Authenticates to a Rosetta SASL listener with kafkajs, produces and
// consumes in a group under the principal's ACLs, then checks that a wrong
// password is refused.
// Usage: node sasl.js host:port mechanism user password topic count
const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const [broker, mechanism, username, password, topic, countArg] = process.argv.slice(2)
  const count = parseInt(countArg, 10)
  const kafka = new Kafka({ clientId: 'kafkajs-sasl', brokers: [broker], logLevel: logLevel.NOTHING, sasl: { mechanism, username, password } })
  const producer = kafka.producer()
  await producer.connect()
  const messages = []
  for (let i = 0; i < count; i++) messages.push({ key: `k${i}`, value: `${mechanism}-${i}` })
  await producer.send({ topic, messages })
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: `${topic}-${mechanism}`, sessionTimeout: 10000, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  let seen = 0
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out with ${seen}`)), 30000)
    consumer.run({
      eachMessage: async ({ message }) => {
        if (message.value.toString().startsWith(mechanism) && ++seen === count) {
          clearTimeout(timer)
          resolve()
        }
      }
    }).catch(reject)
  })
  await consumer.disconnect()

  const wrong = new Kafka({ clientId: 'kafkajs-sasl-wrong', brokers: [broker], logLevel: logLevel.NOTHING, retry: { retries: 0 }, sasl: { mechanism, username, password: password + 'x' } })
  const p2 = wrong.producer()
  try {
    await p2.connect()
    throw new Error('a wrong password was accepted')
  } catch (err) {
    if (err.message === 'a wrong password was accepted') throw err
    if (!/SASL|[Aa]uthentication/.test(`${err.name} ${err.message} ${err.type}`)) throw new Error(`unexpected error: ${err.name} ${err.message}`)
  }
  console.log(`kafkajs sasl ok: ${mechanism} ${seen} messages`)
}

main().catch((err) => { console.error(err); process.exit(1) })
