package io.magnetar.clients;

import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.WireFormat;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminBuilder;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.ClientBuilder;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

/**
 * What every scenario class shares: a client and an admin client for the broker under test
 * (system properties {@code magnetar.serviceUrl} and {@code magnetar.adminUrl}), and a tenant
 * and namespace of its own, so the classes are independent of each other and of earlier runs.
 *
 * <p>Against a secured broker ({@code pulsar+ssl://} and {@code https://} URLs) the system
 * properties {@code magnetar.tlsTrustCertsFile} (the CA's PEM file; hostnames are verified)
 * and {@code magnetar.authToken} (a super-user's token) are set, and every client and admin
 * client of the suite is built with them by {@link #clientBuilder()} and {@link #adminBuilder()};
 * absent, the builders are the plain ones.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
public abstract class Target {
    protected PulsarClient client;
    protected PulsarAdmin admin;
    protected String tenant;
    protected String namespace;

    static String serviceUrl() {
        return System.getProperty("magnetar.serviceUrl", "pulsar://127.0.0.1:6650");
    }

    static String adminUrl() {
        return System.getProperty("magnetar.adminUrl", "http://127.0.0.1:8080");
    }

    /** The scheme of the broker URLs a lookup answers with for this suite's clients. */
    static String brokerScheme() {
        return serviceUrl().startsWith("pulsar+ssl://") ? "pulsar+ssl://" : "pulsar://";
    }

    /** A client builder for the broker under test: its URL, and TLS and a token if set. */
    static ClientBuilder clientBuilder() {
        ClientBuilder builder = PulsarClient.builder().serviceUrl(serviceUrl());
        String trust = System.getProperty("magnetar.tlsTrustCertsFile", "");
        if (!trust.isEmpty()) {
            builder.tlsTrustCertsFilePath(trust).enableTlsHostnameVerification(true)
                    .allowTlsInsecureConnection(false);
        }
        String token = System.getProperty("magnetar.authToken", "");
        if (!token.isEmpty()) {
            builder.authentication(AuthenticationFactory.token(token));
        }
        return builder;
    }

    /** An admin client builder for the broker under test, as {@link #clientBuilder()}. */
    static PulsarAdminBuilder adminBuilder() {
        PulsarAdminBuilder builder = PulsarAdmin.builder().serviceHttpUrl(adminUrl());
        String trust = System.getProperty("magnetar.tlsTrustCertsFile", "");
        if (!trust.isEmpty()) {
            builder.tlsTrustCertsFilePath(trust).enableTlsHostnameVerification(true)
                    .allowTlsInsecureConnection(false);
        }
        String token = System.getProperty("magnetar.authToken", "");
        if (!token.isEmpty()) {
            builder.authentication(AuthenticationFactory.token(token));
        }
        return builder;
    }

    @BeforeAll
    void connect() throws Exception {
        client = clientBuilder()
                .operationTimeout(30, TimeUnit.SECONDS)
                .build();
        admin = adminBuilder().build();
        List<String> clusters = admin.clusters().getClusters();
        tenant = "jt-" + getClass().getSimpleName().toLowerCase() + "-" + shortId();
        admin.tenants().createTenant(tenant, TenantInfo.builder()
                .allowedClusters(new HashSet<>(clusters)).adminRoles(Set.of()).build());
        namespace = tenant + "/ns";
        admin.namespaces().createNamespace(namespace, 8);
    }

    @AfterAll
    void disconnect() throws Exception {
        if (client != null) {
            client.close();
        }
        if (admin != null) {
            admin.close();
        }
    }

    static String shortId() {
        return UUID.randomUUID().toString().substring(0, 8);
    }

    /**
     * The partition index a message id carries, read from its serialized form (Pulsar's
     * MessageIdData: field 3), which every client version shares (MessageIdAdv is 3.1+).
     */
    static int partitionOf(MessageId id) throws java.io.IOException {
        CodedInputStream in = CodedInputStream.newInstance(id.toByteArray());
        int partition = -1;
        for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
            if (tag == ((3 << 3) | WireFormat.WIRETYPE_VARINT)) {
                partition = in.readInt32();
            } else {
                in.skipField(tag);
            }
        }
        return partition;
    }

    /** A fresh persistent topic name in this class's namespace. */
    protected String topic(String name) {
        return "persistent://" + namespace + "/" + name + "-" + shortId();
    }
}
