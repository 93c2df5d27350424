package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.common.policies.data.ClusterData;
import org.apache.pulsar.common.policies.data.SchemaCompatibilityStrategy;
import org.apache.pulsar.common.protocol.schema.IsCompatibilityResponse;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaInfoWithVersion;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.Test;

/**
 * PulsarAdmin's {@code schemas()}, {@code clusters()} and {@code brokers()} (issue 26): a
 * topic's schema history through the admin API (upload, versions, compatibility checks,
 * delete), the cluster's data, the active brokers and the health check. Every answer
 * asserted; run against each Magnetar target and Apache Pulsar 4.0.7.
 */
class AdminSchemasClustersBrokersTest extends Target {

    /** A record whose second version adds a field with a default (BACKWARD compatible). */
    public static class Order {
        public String id;
        public long amount;
    }

    public static class OrderV2 extends Order {
        public String currency;
    }

    /** The same record with a field's type changed: incompatible with Order. */
    public static class OrderBroken {
        public String id;
        public String amount;
    }

    @Test
    void schemaHistory() throws Exception {
        admin.namespaces().setSchemaCompatibilityStrategy(namespace, SchemaCompatibilityStrategy.BACKWARD);
        String topic = topic("schemas");
        admin.topics().createNonPartitionedTopic(topic);
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.schemas().getSchemaInfo(topic));

        SchemaInfo v0 = Schema.AVRO(Order.class).getSchemaInfo();
        admin.schemas().createSchema(topic, v0);
        SchemaInfoWithVersion latest = admin.schemas().getSchemaInfoWithVersion(topic);
        assertEquals(0, latest.getVersion());
        assertEquals(SchemaType.AVRO, latest.getSchemaInfo().getType());
        assertEquals(new String(v0.getSchema()), new String(admin.schemas().getSchemaInfo(topic).getSchema()));

        SchemaInfo v1 = Schema.AVRO(OrderV2.class).getSchemaInfo();
        assertTrue(admin.schemas().testCompatibility(topic, v1).isCompatibility());
        admin.schemas().createSchema(topic, v1);
        assertEquals(1, admin.schemas().getSchemaInfoWithVersion(topic).getVersion());
        assertEquals(new String(v0.getSchema()), new String(admin.schemas().getSchemaInfo(topic, 0).getSchema()));
        List<SchemaInfo> all = admin.schemas().getAllSchemas(topic);
        assertEquals(2, all.size());
        assertEquals(Long.valueOf(1), admin.schemas().getVersionBySchema(topic, v1));

        SchemaInfo broken = Schema.AVRO(OrderBroken.class).getSchemaInfo();
        if (AdminConformanceTest.againstPulsar()) {
            // docs/compatibility.md, "Admin REST API v2": Pulsar 4.0.7 answers this check with
            // a 500 ("Error during schema compatibility check ... Unable to read schema")
            assertThrows(PulsarAdminException.ServerSideErrorException.class,
                    () -> admin.schemas().testCompatibility(topic, broken));
        } else {
            IsCompatibilityResponse answer = admin.schemas().testCompatibility(topic, broken);
            assertFalse(answer.isCompatibility());
            assertEquals(SchemaCompatibilityStrategy.BACKWARD.name(), answer.getSchemaCompatibilityStrategy());
        }
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.schemas().createSchema(topic, broken));

        admin.schemas().deleteSchema(topic);
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.schemas().getSchemaInfo(topic));
    }

    @Test
    void clustersAndBrokers() throws Exception {
        List<String> clusters = admin.clusters().getClusters();
        assertFalse(clusters.isEmpty());
        String cluster = clusters.get(0);
        ClusterData data = admin.clusters().getCluster(cluster);
        assertNotNull(data);
        assertTrue(data.getServiceUrl() != null || data.getServiceUrlTls() != null, data.toString());
        assertTrue(data.getBrokerServiceUrl() != null || data.getBrokerServiceUrlTls() != null, data.toString());
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.clusters().getCluster("nosuch-" + shortId()));

        List<String> brokers = admin.brokers().getActiveBrokers(cluster);
        assertFalse(brokers.isEmpty());
        brokers.forEach(b -> assertTrue(b.matches("[^:/]+:\\d+"), b));
        assertEquals(brokers, admin.brokers().getActiveBrokers());
        admin.brokers().healthcheck();
    }
}
