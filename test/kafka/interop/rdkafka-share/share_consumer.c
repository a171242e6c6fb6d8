/*
 * share_consumer: librdkafka's share consumer (KIP-932, librdkafka 2.15
 * preview, C API) against a broker. Usage:
 *
 *   share_consumer <bootstrap> <topic> <group> <records> <members>
 *
 * The topic holds <records> records keyed "0".."<records-1>" (written
 * beforehand, with the group's share.auto.offset.reset at earliest).
 * <members> share consumers of the group, one thread each, acknowledge
 * explicitly: a key ending in 1 is rejected, a key ending in 0 is released
 * on its first delivery, every other delivery is accepted. It exits 0 when
 * every key not rejected was accepted exactly once, every released one came
 * back with delivery count 2, no rejected one came back, and more than one
 * member took part; it prints what it saw.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdkafka.h"

static const char *bootstrap, *topic, *group;
static int records, members;
static int *accepted, *delivered, *maxcount;
static int *per_member;
static int done_count; /* keys settled for good (accepted or rejected) */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *member(void *arg) {
        int id = (int)(long)arg;
        char errstr[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "share.acknowledgement.mode", "explicit", errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "max.poll.records", "100", errstr, sizeof(errstr))) {
                fprintf(stderr, "member %d: conf: %s\n", id, errstr);
                exit(2);
        }
        if (getenv("RDKAFKA_DEBUG") &&
            rd_kafka_conf_set(conf, "debug", getenv("RDKAFKA_DEBUG"), errstr, sizeof(errstr))) {
                fprintf(stderr, "member %d: debug: %s\n", id, errstr);
                exit(2);
        }
        rd_kafka_share_t *rks = rd_kafka_share_consumer_new(conf, errstr, sizeof(errstr));
        if (!rks) {
                fprintf(stderr, "member %d: new: %s\n", id, errstr);
                exit(2);
        }
        rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(subs, topic, RD_KAFKA_PARTITION_UA);
        rd_kafka_resp_err_t err = rd_kafka_share_subscribe(rks, subs);
        rd_kafka_topic_partition_list_destroy(subs);
        if (err) {
                fprintf(stderr, "member %d: subscribe: %s\n", id, rd_kafka_err2str(err));
                exit(2);
        }
        double deadline = now() + (getenv("SHARE_SECONDS") ? atoi(getenv("SHARE_SECONDS")) : 120);
        for (;;) {
                pthread_mutex_lock(&mu);
                int finished = done_count >= records;
                pthread_mutex_unlock(&mu);
                if (finished || now() > deadline)
                        break;
                rd_kafka_messages_t *batch = NULL;
                rd_kafka_error_t *error = rd_kafka_share_poll(rks, 500, &batch);
                if (error) {
                        fprintf(stderr, "member %d: poll: %s\n", id, rd_kafka_error_string(error));
                        rd_kafka_error_destroy(error);
                        rd_kafka_messages_destroy(batch);
                        continue;
                }
                size_t n = rd_kafka_messages_count(batch);
                for (size_t i = 0; i < n; i++) {
                        rd_kafka_message_t *m = rd_kafka_messages_get(batch, i);
                        if (m->err) {
                                fprintf(stderr, "member %d: record error: %s\n", id, rd_kafka_err2str(m->err));
                                continue;
                        }
                        char key[32] = {0};
                        memcpy(key, m->key, m->key_len < sizeof(key) - 1 ? m->key_len : sizeof(key) - 1);
                        int k = atoi(key);
                        int count = rd_kafka_message_delivery_count(m);
                        rd_kafka_share_AcknowledgeType_t type = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_ACCEPT;
                        if (k % 10 == 1)
                                type = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_REJECT;
                        else if (k % 10 == 0 && count == 1)
                                type = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_RELEASE;
                        pthread_mutex_lock(&mu);
                        if (k >= 0 && k < records) {
                                delivered[k]++;
                                if (count > maxcount[k])
                                        maxcount[k] = count;
                                if (type == RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_ACCEPT)
                                        accepted[k]++;
                                if (type != RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_RELEASE)
                                        done_count++;
                        }
                        per_member[id]++;
                        pthread_mutex_unlock(&mu);
                        err = rd_kafka_share_acknowledge_type(rks, m, type);
                        if (err)
                                fprintf(stderr, "member %d: acknowledge: %s\n", id, rd_kafka_err2str(err));
                }
                rd_kafka_messages_destroy(batch);
        }
        rd_kafka_topic_partition_list_t *results = NULL;
        rd_kafka_error_t *error = rd_kafka_share_commit_sync(rks, 10000, &results);
        if (error) {
                fprintf(stderr, "member %d: commit: %s\n", id, rd_kafka_error_string(error));
                rd_kafka_error_destroy(error);
        }
        if (results) {
                for (int i = 0; i < results->cnt; i++)
                        if (results->elems[i].err)
                                fprintf(stderr, "member %d: commit %s [%d]: %s\n", id, results->elems[i].topic,
                                        results->elems[i].partition, rd_kafka_err2str(results->elems[i].err));
                rd_kafka_topic_partition_list_destroy(results);
        }
        error = rd_kafka_share_consumer_close(rks);
        if (error) {
                fprintf(stderr, "member %d: close: %s\n", id, rd_kafka_error_string(error));
                rd_kafka_error_destroy(error);
        }
        rd_kafka_share_destroy(rks);
        return NULL;
}

int main(int argc, char **argv) {
        if (argc != 6) {
                fprintf(stderr, "usage: %s <bootstrap> <topic> <group> <records> <members>\n", argv[0]);
                return 2;
        }
        bootstrap = argv[1];
        topic = argv[2];
        group = argv[3];
        records = atoi(argv[4]);
        members = atoi(argv[5]);
        accepted = calloc(records, sizeof(int));
        delivered = calloc(records, sizeof(int));
        maxcount = calloc(records, sizeof(int));
        per_member = calloc(members, sizeof(int));
        printf("librdkafka %s\n", rd_kafka_version_str());
        double start = now();
        pthread_t *threads = calloc(members, sizeof(pthread_t));
        for (int i = 0; i < members; i++)
                pthread_create(&threads[i], NULL, member, (void *)(long)i);
        for (int i = 0; i < members; i++)
                pthread_join(threads[i], NULL);
        int bad = 0, acc = 0, rel = 0, rej = 0;
        for (int k = 0; k < records; k++) {
                if (k % 10 == 1) {
                        rej++;
                        if (delivered[k] != 1 || accepted[k] != 0) {
                                if (bad++ < 10)
                                        fprintf(stderr, "rejected key %d delivered %d times\n", k, delivered[k]);
                        }
                        continue;
                }
                if (accepted[k] != 1) {
                        if (bad++ < 10)
                                fprintf(stderr, "key %d accepted %d times (delivered %d)\n", k, accepted[k], delivered[k]);
                        continue;
                }
                acc++;
                if (k % 10 == 0) {
                        rel++;
                        if (maxcount[k] != 2 || delivered[k] != 2) {
                                if (bad++ < 10)
                                        fprintf(stderr, "released key %d: delivered %d times, last count %d\n", k,
                                                delivered[k], maxcount[k]);
                        }
                }
        }
        int active = 0;
        printf("records per member:");
        for (int i = 0; i < members; i++) {
                printf(" %d", per_member[i]);
                active += per_member[i] > 0;
        }
        printf("\naccepted %d (of them released once first %d), rejected %d, in %.1f s\n", acc, rel, rej, now() - start);
        if (members > 1 && active < 2) {
                fprintf(stderr, "only %d member(s) got records\n", active);
                bad++;
        }
        if (bad) {
                fprintf(stderr, "%d problems\n", bad);
                return 1;
        }
        printf("ok\n");
        return 0;
}
