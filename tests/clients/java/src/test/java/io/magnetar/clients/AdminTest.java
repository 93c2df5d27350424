package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.junit.jupiter.api.Test;

/** The Java admin client's common calls. */
class AdminTest extends Target {

    @Test
    void tenantsAndNamespaces() throws Exception {
        String t = "jt-admin-" + shortId();
        Set<String> clusters = new HashSet<>(admin.clusters().getClusters());
        admin.tenants().createTenant(t, TenantInfo.builder().allowedClusters(clusters).build());
        assertTrue(admin.tenants().getTenants().contains(t));
        assertEquals(clusters, admin.tenants().getTenantInfo(t).getAllowedClusters());
        String ns = t + "/orders";
        admin.namespaces().createNamespace(ns);
        assertEquals(List.of(ns), admin.namespaces().getNamespaces(t));
        admin.namespaces().setRetention(ns, new RetentionPolicies(60, 100));
        RetentionPolicies retention = admin.namespaces().getRetention(ns);
        assertEquals(60, retention.getRetentionTimeInMinutes());
        assertEquals(100, retention.getRetentionSizeInMB());
        admin.namespaces().setNamespaceMessageTTL(ns, 300);
        assertEquals(300, admin.namespaces().getNamespaceMessageTTL(ns));
        admin.namespaces().setDeduplicationStatus(ns, true);
        assertTrue(admin.namespaces().getDeduplicationStatus(ns));
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.namespaces().createNamespace(ns));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.namespaces().getPolicies(t + "/missing"));
        admin.namespaces().deleteNamespace(ns);
        admin.tenants().deleteTenant(t);
        assertFalse(admin.tenants().getTenants().contains(t));
    }

    @Test
    void topicsStatsAndInternalStats() throws Exception {
        String topic = topic("admin-topic");
        String partitioned = topic("admin-partitioned");
        admin.topics().createNonPartitionedTopic(topic);
        admin.topics().createPartitionedTopic(partitioned, 4);
        assertEquals(4, admin.topics().getPartitionedTopicMetadata(partitioned).partitions);
        assertTrue(admin.topics().getList(namespace).contains(topic));
        assertTrue(admin.topics().getPartitionedTopicList(namespace).contains(partitioned));
        try (Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < 25; i++) {
                p.send(("m" + i).getBytes());
            }
            TopicStats stats = admin.topics().getStats(topic);
            assertEquals(25, stats.getMsgInCounter());
            assertEquals(1, stats.getPublishers().size());
        }
        PersistentTopicInternalStats internal = admin.topics().getInternalStats(topic);
        assertEquals(25, internal.entriesAddedCounter);
        assertFalse(internal.ledgers.isEmpty());
        admin.topics().delete(topic);
        assertFalse(admin.topics().getList(namespace).contains(topic));
        admin.topics().deletePartitionedTopic(partitioned);
    }

    @Test
    void subscriptionsSkipAndResetCursor() throws Exception {
        String topic = topic("admin-subs");
        admin.topics().createNonPartitionedTopic(topic);
        admin.topics().createSubscription(topic, "audit", MessageId.earliest);
        assertEquals(List.of("audit"), admin.topics().getSubscriptions(topic));
        long beforeSend = System.currentTimeMillis();
        try (Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < 10; i++) {
                p.send(("m" + i).getBytes());
            }
        }
        assertEquals(10, admin.topics().getStats(topic).getSubscriptions().get("audit").getMsgBacklog());
        admin.topics().skipMessages(topic, "audit", 4);
        assertEquals(6, admin.topics().getStats(topic).getSubscriptions().get("audit").getMsgBacklog());
        admin.topics().resetCursor(topic, "audit", beforeSend - 1000);
        assertEquals(10, admin.topics().getStats(topic).getSubscriptions().get("audit").getMsgBacklog());
        try (Consumer<byte[]> c = client.newConsumer().topic(topic).subscriptionName("audit").subscribe()) {
            assertEquals("m0", new String(c.receive(10, TimeUnit.SECONDS).getValue()));
        }
        admin.topics().deleteSubscription(topic, "audit");
        assertTrue(admin.topics().getSubscriptions(topic).isEmpty());
    }
}
