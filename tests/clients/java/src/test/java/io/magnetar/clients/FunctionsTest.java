package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.common.functions.FunctionConfig;
import org.apache.pulsar.common.policies.data.FunctionStats;
import org.apache.pulsar.common.policies.data.FunctionStatus;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.DisabledIfSystemProperty;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code PulsarAdmin.functions()} with a Python function (Pulsar's exclamation example),
 * uploaded from a file with {@code createFunction(config, fileName)}: get, list, status,
 * stats, trigger, delete (docs/functions.md).
 *
 * <p>A broker that runs no instances (the two-broker cluster target: instances run in
 * {@code magnetar standalone}) stores, lists, answers and deletes the function, and its status
 * says why no instance runs; the scenarios that need a running instance (messages through
 * it, trigger) run where the status shows one running. Not run against the Apache Pulsar
 * standalone of {@code make test-clients-pulsar}, which runs no functions worker
 * ({@code -Dmagnetar.functionsWorker=false}, set by tests/clients/test_java_client.py).
 */
@DisabledIfSystemProperty(named = "magnetar.functionsWorker", matches = "false")
class FunctionsTest extends Target {
    private static final String SOURCE = String.join("\n",
            "from pulsar import Function",
            "",
            "",
            "class ExclamationFunction(Function):",
            "    def process(self, input, context):",
            "        return input + \"!\"",
            "");

    private static final String NO_RUNTIME = "no function runtime on this broker";

    private static final long WAIT_MS = 60_000;

    @Test
    void createGetListStatusStatsTriggerDelete(@TempDir Path dir) throws Exception {
        Path py = dir.resolve("exclamation_function.py");
        Files.writeString(py, SOURCE, StandardCharsets.UTF_8);
        String name = "excl-" + shortId();
        String input = topic("fn-in");
        String output = topic("fn-out");

        FunctionConfig config = new FunctionConfig();
        config.setTenant(tenant);
        config.setNamespace("ns");
        config.setName(name);
        config.setRuntime(FunctionConfig.Runtime.PYTHON);
        config.setPy(py.toString());
        config.setClassName("exclamation_function.ExclamationFunction");
        config.setInputs(List.of(input));
        config.setOutput(output);
        config.setSubscriptionPosition(SubscriptionInitialPosition.Earliest);
        admin.functions().createFunction(config, py.toString());

        FunctionConfig got = admin.functions().getFunction(tenant, "ns", name);
        assertEquals("exclamation_function.ExclamationFunction", got.getClassName());
        assertEquals(List.of(input), List.copyOf(got.getInputs()));
        assertEquals(output, got.getOutput());
        assertEquals(FunctionConfig.Runtime.PYTHON, got.getRuntime());
        assertEquals(FunctionConfig.ProcessingGuarantees.ATLEAST_ONCE, got.getProcessingGuarantees());
        assertEquals(Integer.valueOf(1), got.getParallelism());
        assertEquals(List.of(name), admin.functions().getFunctions(tenant, "ns"));
        // a second create of the same name is refused
        assertThrows(PulsarAdminException.class,
                () -> admin.functions().createFunction(config, py.toString()));

        FunctionStatus status = waitForStatus(name);
        assertEquals(1, status.getNumInstances());
        FunctionStatus.FunctionInstanceStatus.FunctionInstanceStatusData instance =
                status.getInstances().get(0).getStatus();
        if (!instance.isRunning()) {
            // no runtime here: it says so, counts nothing, and the rest is a stored function's
            assertTrue(instance.getError().contains(NO_RUNTIME), instance.getError());
            assertEquals(0, status.getNumRunning());
            FunctionStats stats = admin.functions().getFunctionStats(tenant, "ns", name);
            assertEquals(0, stats.getReceivedTotal());
            assertEquals(1, stats.getInstances().size());
        } else {
            assertEquals(1, status.getNumRunning());
            messagesThroughTheFunction(name, input, output);
        }

        admin.functions().deleteFunction(tenant, "ns", name);
        assertTrue(admin.functions().getFunctions(tenant, "ns").isEmpty());
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.functions().getFunction(tenant, "ns", name));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.functions().getFunctionStatus(tenant, "ns", name));
    }

    @Test
    void badFunctionsAreRefusedAtCreateTime(@TempDir Path dir) throws Exception {
        Path py = dir.resolve("exclamation_function.py");
        Files.writeString(py, SOURCE, StandardCharsets.UTF_8);
        FunctionConfig config = new FunctionConfig();
        config.setTenant(tenant);
        config.setNamespace("ns");
        config.setName("bad-" + shortId());
        config.setRuntime(FunctionConfig.Runtime.PYTHON);
        config.setClassName("exclamation_function.NoSuchClass");
        config.setInputs(List.of(topic("fn-bad")));
        PulsarAdminException missing = assertThrows(PulsarAdminException.class,
                () -> admin.functions().createFunction(config, py.toString()));
        assertEquals(400, missing.getStatusCode());
        assertTrue(missing.getMessage().contains("NoSuchClass"), missing.getMessage());
        assertFalse(admin.functions().getFunctions(tenant, "ns").contains(config.getName()));
    }

    /** A message in and its result out; trigger; stats counting both. */
    private void messagesThroughTheFunction(String name, String input, String output)
            throws Exception {
        try (Consumer<byte[]> out = client.newConsumer().topic(output).subscriptionName("check")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Producer<byte[]> in = client.newProducer().topic(input).create()) {
            in.send("hello".getBytes(StandardCharsets.UTF_8));
            Message<byte[]> msg = out.receive(60, TimeUnit.SECONDS);
            assertTrue(msg != null, "no output within 60 s");
            assertEquals("hello!", new String(msg.getData(), StandardCharsets.UTF_8));
            assertEquals(input, msg.getProperty("__pfn_input_topic__"));
            out.acknowledge(msg);
        }
        assertEquals("hey!", admin.functions().triggerFunction(tenant, "ns", name, null, "hey", null));
        long deadline = System.currentTimeMillis() + WAIT_MS;
        FunctionStats stats = admin.functions().getFunctionStats(tenant, "ns", name);
        while (stats.getProcessedSuccessfullyTotal() < 2 && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
            stats = admin.functions().getFunctionStats(tenant, "ns", name);
        }
        assertEquals(2, stats.getReceivedTotal());
        assertEquals(2, stats.getProcessedSuccessfullyTotal());
        assertEquals(0, stats.getUserExceptionsTotal());
        assertEquals(1, stats.getInstances().size());
        assertEquals(2, stats.getInstances().get(0).getMetrics().getProcessedSuccessfullyTotal());
        assertTrue(stats.getLastInvocation() != null && stats.getLastInvocation() > 0);
        FunctionStatus.FunctionInstanceStatus.FunctionInstanceStatusData one =
                admin.functions().getFunctionStatus(tenant, "ns", name, 0);
        assertTrue(one.isRunning());
        assertEquals(2, one.getNumSuccessfullyProcessed());
        assertNull(emptyToNull(one.getError()));
    }

    /** The status once the instance runs, or once the broker says no runtime runs it. */
    private FunctionStatus waitForStatus(String name) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (true) {
            FunctionStatus status = admin.functions().getFunctionStatus(tenant, "ns", name);
            FunctionStatus.FunctionInstanceStatus.FunctionInstanceStatusData instance =
                    status.getInstances().get(0).getStatus();
            String error = instance.getError() == null ? "" : instance.getError();
            if (instance.isRunning() || error.contains(NO_RUNTIME)
                    || System.currentTimeMillis() > deadline) {
                return status;
            }
            Thread.sleep(200);
        }
    }

    private static String emptyToNull(String s) {
        return s == null || s.isEmpty() ? null : s;
    }
}
