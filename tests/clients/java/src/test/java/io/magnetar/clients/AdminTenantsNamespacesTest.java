package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.common.policies.data.AutoTopicCreationOverride;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.BundlesData;
import org.apache.pulsar.common.policies.data.Policies;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.apache.pulsar.common.policies.data.SchemaCompatibilityStrategy;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.junit.jupiter.api.Test;

/**
 * PulsarAdmin's {@code tenants()} and {@code namespaces()} (issue 26): tenant lifecycle and its
 * refusals, namespace policies set, read back and removed, bundles, unload and split under a
 * producer that loses nothing. Every answer asserted; run against each Magnetar target and,
 * with {@code make test-clients-pulsar}, Apache Pulsar 4.0.7.
 */
class AdminTenantsNamespacesTest extends Target {

    @Test
    void tenantLifecycle() throws Exception {
        Set<String> clusters = new HashSet<>(admin.clusters().getClusters());
        String t = "jt-tenant-" + shortId();
        TenantInfo info = TenantInfo.builder().adminRoles(Set.of("ops")).allowedClusters(clusters).build();
        admin.tenants().createTenant(t, info);
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.tenants().createTenant(t, info));
        assertTrue(admin.tenants().getTenants().contains(t));
        TenantInfo got = admin.tenants().getTenantInfo(t);
        assertEquals(Set.of("ops"), got.getAdminRoles());
        assertEquals(clusters, got.getAllowedClusters());

        admin.tenants().updateTenant(t, TenantInfo.builder().adminRoles(Set.of("ops", "dev"))
                .allowedClusters(clusters).build());
        assertEquals(Set.of("ops", "dev"), admin.tenants().getTenantInfo(t).getAdminRoles());

        admin.namespaces().createNamespace(t + "/a");
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.tenants().deleteTenant(t));
        admin.namespaces().deleteNamespace(t + "/a");
        admin.tenants().deleteTenant(t);
        assertFalse(admin.tenants().getTenants().contains(t));
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.tenants().getTenantInfo(t));
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.tenants().deleteTenant(t));
        assertThrows(PulsarAdminException.PreconditionFailedException.class,
                () -> admin.tenants().createTenant("jt-nocluster-" + shortId(),
                        TenantInfo.builder().allowedClusters(Set.of("nosuch-cluster")).build()));
    }

    @Test
    void namespaceLifecycleAndPolicies() throws Exception {
        String ns = tenant + "/pol-" + shortId();
        admin.namespaces().createNamespace(ns, 4);
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.namespaces().createNamespace(ns));
        assertTrue(admin.namespaces().getNamespaces(tenant).contains(ns));
        Policies policies = admin.namespaces().getPolicies(ns);
        assertEquals(4, policies.bundles.getNumBundles());

        RetentionPolicies retention = new RetentionPolicies(60, 100);
        admin.namespaces().setRetention(ns, retention);
        assertEquals(retention, admin.namespaces().getRetention(ns));
        admin.namespaces().removeRetention(ns);

        admin.namespaces().setNamespaceMessageTTL(ns, 120);
        assertEquals(120, admin.namespaces().getNamespaceMessageTTL(ns));
        admin.namespaces().removeNamespaceMessageTTL(ns);
        assertNull(admin.namespaces().getNamespaceMessageTTL(ns));

        admin.namespaces().setDeduplicationStatus(ns, true);
        assertEquals(Boolean.TRUE, admin.namespaces().getDeduplicationStatus(ns));
        admin.namespaces().removeDeduplicationStatus(ns);
        assertNull(admin.namespaces().getDeduplicationStatus(ns));

        BacklogQuota quota = BacklogQuota.builder().limitSize(10L << 20).limitTime(3600)
                .retentionPolicy(BacklogQuota.RetentionPolicy.producer_exception).build();
        admin.namespaces().setBacklogQuota(ns, quota);
        Map<BacklogQuota.BacklogQuotaType, BacklogQuota> quotas = admin.namespaces().getBacklogQuotaMap(ns);
        BacklogQuota stored = quotas.get(BacklogQuota.BacklogQuotaType.destination_storage);
        assertEquals(10L << 20, stored.getLimitSize());
        assertEquals(3600, stored.getLimitTime());
        assertEquals(BacklogQuota.RetentionPolicy.producer_exception, stored.getPolicy());
        admin.namespaces().removeBacklogQuota(ns);
        assertFalse(admin.namespaces().getBacklogQuotaMap(ns)
                .containsKey(BacklogQuota.BacklogQuotaType.destination_storage));

        AutoTopicCreationOverride auto = AutoTopicCreationOverride.builder().allowAutoTopicCreation(true)
                .topicType("partitioned").defaultNumPartitions(2).build();
        admin.namespaces().setAutoTopicCreation(ns, auto);
        assertEquals(auto, admin.namespaces().getAutoTopicCreation(ns));
        admin.namespaces().removeAutoTopicCreation(ns);
        assertNull(admin.namespaces().getAutoTopicCreation(ns));

        admin.namespaces().setMaxProducersPerTopic(ns, 3);
        assertEquals(3, admin.namespaces().getMaxProducersPerTopic(ns));
        admin.namespaces().removeMaxProducersPerTopic(ns);
        assertNull(admin.namespaces().getMaxProducersPerTopic(ns));
        admin.namespaces().setMaxConsumersPerTopic(ns, 4);
        assertEquals(4, admin.namespaces().getMaxConsumersPerTopic(ns));
        admin.namespaces().removeMaxConsumersPerTopic(ns);
        assertNull(admin.namespaces().getMaxConsumersPerTopic(ns));

        admin.namespaces().setCompactionThreshold(ns, 1L << 20);
        assertEquals(1L << 20, admin.namespaces().getCompactionThreshold(ns));
        admin.namespaces().removeCompactionThreshold(ns);
        assertNull(admin.namespaces().getCompactionThreshold(ns));

        admin.namespaces().setOffloadThreshold(ns, 1L << 30);
        assertEquals(1L << 30, admin.namespaces().getOffloadThreshold(ns));
        admin.namespaces().setOffloadDeleteLag(ns, 2, TimeUnit.HOURS);
        assertEquals(TimeUnit.HOURS.toMillis(2), admin.namespaces().getOffloadDeleteLagMs(ns));
        admin.namespaces().clearOffloadDeleteLag(ns);
        assertNull(admin.namespaces().getOffloadDeleteLagMs(ns));

        admin.namespaces().setSchemaCompatibilityStrategy(ns, SchemaCompatibilityStrategy.BACKWARD);
        assertEquals(SchemaCompatibilityStrategy.BACKWARD, admin.namespaces().getSchemaCompatibilityStrategy(ns));
        admin.namespaces().setIsAllowAutoUpdateSchema(ns, false);
        assertFalse(admin.namespaces().getIsAllowAutoUpdateSchema(ns));
        admin.namespaces().setSchemaValidationEnforced(ns, true);
        assertTrue(admin.namespaces().getSchemaValidationEnforced(ns));

        assertThrows(PulsarAdminException.NotAuthorizedException.class,  // Pulsar's 403 "Invalid cluster id"
                () -> admin.namespaces().setNamespaceReplicationClusters(ns, Set.of("nosuch-cluster")));
        assertEquals(new HashSet<>(admin.clusters().getClusters()),
                new HashSet<>(admin.namespaces().getNamespaceReplicationClusters(ns)));

        String topic = "persistent://" + ns + "/t";
        admin.topics().createNonPartitionedTopic(topic);
        assertEquals(List.of(topic), admin.namespaces().getTopics(ns));
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.namespaces().deleteNamespace(ns));
        admin.topics().delete(topic);
        admin.namespaces().deleteNamespace(ns);
        assertFalse(admin.namespaces().getNamespaces(tenant).contains(ns));
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.namespaces().getPolicies(ns));
    }

    @Test
    void bundlesUnloadAndSplitUnderAProducer() throws Exception {
        String ns = tenant + "/bundles-" + shortId();
        admin.namespaces().createNamespace(ns, 2);
        BundlesData bundles = admin.namespaces().getBundles(ns);
        assertEquals(2, bundles.getNumBundles());
        assertEquals(List.of("0x00000000", "0x80000000", "0xffffffff"), bundles.getBoundaries());

        String topic = "persistent://" + ns + "/split-me";
        List<String> sent = new ArrayList<>();
        try (Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false)
                .sendTimeout(60, TimeUnit.SECONDS).create()) {
            send(p, "before", sent);
            String range = admin.lookups().getBundleRange(topic);
            String[] ends = range.split("_");
            assertTrue(bundles.getBoundaries().contains(ends[0]) && bundles.getBoundaries().contains(ends[1]), range);

            admin.namespaces().unloadNamespaceBundle(ns, range);
            send(p, "after-unload", sent);

            admin.namespaces().splitNamespaceBundle(ns, range, false, null);
            AdminConformanceTest.eventually(() -> numBundles(ns) == 3, "three bundles after the split");
            send(p, "after-split", sent);
            String half = admin.lookups().getBundleRange(topic);
            assertNotEquals(range, half);
            long lower = Long.decode(half.split("_")[0]);
            long upper = Long.decode(half.split("_")[1]);
            assertTrue(lower >= Long.decode(ends[0]) && upper <= Long.decode(ends[1]), half + " within " + range);
            assertTrue(admin.namespaces().getBundles(ns).getBoundaries().contains(half.split("_")[0]));

            admin.namespaces().unload(ns);
            send(p, "after-namespace-unload", sent);
        }
        assertEquals(List.of(topic), admin.namespaces().getTopics(ns));
        List<String> received = new ArrayList<>();
        try (Consumer<byte[]> c = client.newConsumer().topic(topic).subscriptionName("check")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            for (Message<byte[]> m = c.receive(10, TimeUnit.SECONDS); m != null; m = c.receive(2, TimeUnit.SECONDS)) {
                received.add(new String(m.getValue()));
                c.acknowledge(m);
            }
        }
        assertEquals(sent, received);
    }

    private int numBundles(String ns) {
        try {
            return admin.namespaces().getBundles(ns).getNumBundles();
        } catch (PulsarAdminException e) {
            return -1;
        }
    }

    private static void send(Producer<byte[]> p, String what, List<String> sent) throws Exception {
        for (int i = 0; i < 3; i++) {
            String value = what + "-" + i;
            assertNotNull(p.send(value.getBytes()));
            sent.add(value);
        }
    }
}
