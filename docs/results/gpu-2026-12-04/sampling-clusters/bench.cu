// Times kernels/sample.cu variants (KERNEL_FILE) with CUDA events; prints
// a checksum of the drawn tokens so variants can be compared.
#include KERNEL_FILE
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)

static int blocks_per_row(int rows, int vocab, int sms) {
    int b = 8;
    while (b > 1 && (rows * b > sms || vocab < b * 8192)) b /= 2;
    return b;
}

int main(int argc, char** argv) {
    const int clustered = atoi(argv[1]);
    const int vocab = 128256, max_rows = 128;
    std::mt19937 gen(42);
    std::normal_distribution<float> normal(0.f, 3.f);
    std::vector<float> host((size_t)max_rows * vocab);
    for (auto& v : host) v = normal(gen);
    float *logits, *weights; Draw* draws; uint32_t* tokens;
    CHECK(cudaMalloc(&logits, host.size() * 4));
    CHECK(cudaMalloc(&weights, host.size() * 4));
    CHECK(cudaMalloc(&draws, max_rows * sizeof(Draw)));
    CHECK(cudaMalloc(&tokens, max_rows * 4));
    CHECK(cudaMemcpy(logits, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int size : {1, 2, 4, 8}) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(128 * size); cfg.blockDim = dim3(THREADS);
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = size; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr; cfg.numAttrs = 1;
        int clusters = -1;
        cudaOccupancyMaxActiveClusters(&clusters, (void*)sample_f32, &cfg);
        printf("max active clusters of %d: %d\n", size, clusters);
    }
    for (int config = 0; config < 3; ++config) {
        std::vector<Draw> d(max_rows);
        for (int r = 0; r < max_rows; ++r) {
            d[r].inv_temperature = 1.0f / 0.7f;
            d[r].top_p = config == 0 ? 0.95f : config == 1 ? 0.9f : 1.0f;
            d[r].top_k = config == 1 ? 50 : 0;
            d[r].uniform = (float)((r * 7919) % 1000) / 1000.0f;
        }
        CHECK(cudaMemcpy(draws, d.data(), max_rows * sizeof(Draw), cudaMemcpyHostToDevice));
        for (int rows : {1, 8, 16, 24, 32, 48, 64, 128}) for (int blocks : {1, 2, 4, 8}) {
            if (getenv("ALL_BLOCKS") == nullptr && blocks != (clustered ? blocks_per_row(rows, vocab, sms) : 1)) continue;
            if (config > 0 && getenv("ALL_BLOCKS")) continue;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(rows * blocks); cfg.blockDim = dim3(THREADS);
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeClusterDimension;
            attr[0].val.clusterDim.x = blocks; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
            cfg.attrs = attr; cfg.numAttrs = clustered ? 1 : 0;
            auto launch = [&] { CHECK(cudaLaunchKernelEx(&cfg, sample_f32, (const float*)logits, weights, (const Draw*)draws, tokens, vocab)); };
            for (int i = 0; i < 10; ++i) launch();
            CHECK(cudaDeviceSynchronize());
            cudaEventRecord(a);
            for (int i = 0; i < 100; ++i) launch();
            cudaEventRecord(b);
            CHECK(cudaEventSynchronize(b));
            float ms; cudaEventElapsedTime(&ms, a, b);
            std::vector<uint32_t> t(rows);
            CHECK(cudaMemcpy(t.data(), tokens, rows * 4, cudaMemcpyDeviceToHost));
            unsigned long long sum = 0;
            for (int r = 0; r < rows; ++r) sum = sum * 1000003ull + t[r];
#ifdef STAMPS
            if (rows == 1) { long long st[64]; cudaMemcpyFromSymbol(st, stamps, sizeof(st)); printf("stamps (cycles from 0):"); for (int k = 0; k < 64; ++k) if (st[k]) printf(" %d:%lld", k, st[k] ? st[k] - st[0] : -1); printf("\n"); }
#endif
            printf("config %d rows %3d blocks %d: %7.1f us  tokens %u %u.. checksum %llx\n", config, rows, blocks, ms * 10.0f, t[0], rows > 1 ? t[1] : 0, sum);
        }
    }
    return 0;
}
